// External programs the integration tests drive. `npm test` first runs test/ensure-tools.mjs, which
// installs them or stops with one clear line, so here a missing one is a plain error.
import { accessSync, constants } from 'node:fs';
import { delimiter, join } from 'node:path';

function onPath(cmd: string): string | null {
  for (const dir of (process.env.PATH ?? '').split(delimiter).filter(Boolean)) {
    const p = join(dir, cmd);
    try {
      accessSync(p, constants.X_OK);
      return p;
    } catch {
      // not here
    }
  }
  return null;
}

/** Chromium for playwright-core: CHROMIUM_BIN, else `chromium` / `chromium-browser` on PATH. */
export function chromiumBinary(): string {
  const p = process.env.CHROMIUM_BIN || onPath('chromium') || onPath('chromium-browser');
  if (!p)
    throw new Error(
      'chromium not found: run the tests with `npm test` (it installs it), apt-get install chromium, or set CHROMIUM_BIN',
    );
  return p;
}
