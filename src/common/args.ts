// Shared option parsing on node:util parseArgs, with --help rendered from the same table.
import { parseArgs } from 'node:util';

export interface OptionSpec {
  type: 'string' | 'boolean';
  short?: string;
  default?: string | boolean;
  multiple?: boolean;
  help: string;
  /** Placeholder shown in help, e.g. PORT. */
  arg?: string;
}

export type OptionTable = Record<string, OptionSpec>;

export function renderHelp(command: string, summary: string, options: OptionTable): string {
  const rows = Object.entries(options).map(([name, o]) => {
    const flag = `${o.short ? `-${o.short}, ` : '    '}--${name}${o.type === 'string' ? ` ${o.arg ?? 'VALUE'}` : ''}`;
    const def = o.default !== undefined && o.default !== false ? ` (default: ${String(o.default)})` : '';
    return [flag, o.help + def] as const;
  });
  const width = Math.max(...rows.map(([f]) => f.length), 10);
  return `Usage: kvrouter ${command} [options]\n\n${summary}\n\nOptions:\n${rows
    .map(([f, h]) => `  ${f.padEnd(width)}  ${h}`)
    .join('\n')}\n  ${'-h, --help'.padEnd(width)}  show this help\n`;
}

export type ParsedOptions = Record<string, string | boolean | string[] | undefined>;

/** Parse argv; returns null after printing help or an error (exit code in `code`). */
export function parseCommand(
  command: string,
  summary: string,
  options: OptionTable,
  argv: string[],
): { values: ParsedOptions; positionals: string[] } | { code: number } {
  const spec: Record<string, { type: 'string' | 'boolean'; short?: string; multiple?: boolean }> = {
    help: { type: 'boolean', short: 'h' },
  };
  for (const [k, o] of Object.entries(options)) {
    spec[k] = { type: o.type, ...(o.short ? { short: o.short } : {}), ...(o.multiple ? { multiple: true } : {}) };
  }
  let parsed: ReturnType<typeof parseArgs>;
  try {
    parsed = parseArgs({ args: argv, options: spec, allowPositionals: true, strict: true });
  } catch (err) {
    process.stderr.write(`kvrouter ${command}: ${(err as Error).message}\n\n${renderHelp(command, summary, options)}`);
    return { code: 2 };
  }
  if (parsed.values.help) {
    process.stdout.write(renderHelp(command, summary, options));
    return { code: 0 };
  }
  const values: ParsedOptions = {};
  for (const [k, o] of Object.entries(options))
    values[k] = (parsed.values as ParsedOptions)[k] ?? (o.default as string | boolean | undefined);
  return { values, positionals: parsed.positionals };
}

export function intOption(values: ParsedOptions, name: string): number {
  const raw = values[name];
  const n = Number(raw);
  if (typeof raw !== 'string' || !Number.isInteger(n))
    throw new Error(`--${name} must be an integer, got ${String(raw)}`);
  return n;
}

export function numberOption(values: ParsedOptions, name: string): number {
  const raw = values[name];
  const n = Number(raw);
  if (typeof raw !== 'string' || !Number.isFinite(n)) throw new Error(`--${name} must be a number, got ${String(raw)}`);
  return n;
}
