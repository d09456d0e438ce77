// A progress bar on stderr for long runs: redrawn in place on a terminal (at most 5 times a
// second), a plain line every 25% otherwise (logs, CI).
export class Progress {
  private done = 0;
  private lastDraw = 0;
  private lastQuarter = -1;
  private readonly t0 = Date.now();
  private readonly tty = process.stderr.isTTY === true;

  constructor(
    private readonly total: number,
    private label: string,
  ) {}

  setLabel(label: string): void {
    this.label = label;
  }

  tick(n = 1): void {
    this.done = Math.min(this.total, this.done + n);
    const now = Date.now();
    if (this.tty) {
      if (now - this.lastDraw < 200 && this.done < this.total) return;
      this.lastDraw = now;
      process.stderr.write(`\r${this.line()}\x1b[K`);
    } else {
      const q = Math.floor((4 * this.done) / Math.max(1, this.total));
      if (q === this.lastQuarter) return;
      this.lastQuarter = q;
      process.stderr.write(`${this.line()}\n`);
    }
  }

  /** Print a message above the bar. */
  log(msg: string): void {
    process.stderr.write(this.tty ? `\r\x1b[K${msg}\n${this.line()}` : `${msg}\n`);
  }

  finish(): void {
    if (this.tty) process.stderr.write(`\r${this.line()}\x1b[K\n`);
  }

  private line(): string {
    const width = 30;
    const f = this.total ? this.done / this.total : 1;
    const filled = Math.round(f * width);
    const el = (Date.now() - this.t0) / 1000;
    const eta = f > 0 && f < 1 ? ` eta ${fmtS((el / f) * (1 - f))}` : '';
    return `[${'#'.repeat(filled)}${'.'.repeat(width - filled)}] ${(f * 100).toFixed(0).padStart(3)}% ${this.done}/${this.total} ${this.label} ${fmtS(el)}${eta}`;
  }
}

function fmtS(s: number): string {
  return s >= 60 ? `${Math.floor(s / 60)}m${String(Math.round(s % 60)).padStart(2, '0')}s` : `${s.toFixed(0)}s`;
}
