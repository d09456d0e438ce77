// Files that exist only once the project is built: compiled worker and browser scripts, the WASM
// hasher. The modules that load them run from dist/ (the CLI) or from src/ (vitest, whose global
// setup builds dist/ first), so a file is looked for next to the calling module, then at the same
// place under dist/.
import { existsSync } from 'node:fs';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

const ROOT = fileURLToPath(new URL('..', import.meta.url)); // <repo>/src/ or <repo>/dist/: this file is in common/
const DIST = join(ROOT, '..', 'dist');

/** Absolute path of the built file `name`, relative to the module at `moduleUrl`; null when it is not built. */
export function builtFile(moduleUrl: string, name: string): string | null {
  const dir = dirname(fileURLToPath(moduleUrl));
  for (const path of [join(dir, name), join(DIST, relative(ROOT, dir), name)]) if (existsSync(path)) return path;
  return null;
}
