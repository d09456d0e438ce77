// Integration tests spawn the real CLI from dist/: build it once before any test runs.
import { execFileSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';

export default function setup(): void {
  const root = fileURLToPath(new URL('..', import.meta.url));
  execFileSync(process.execPath, ['node_modules/typescript/bin/tsc', '-p', '.'], { cwd: root, stdio: 'inherit' });
}
