// Integration tests spawn the real CLI from dist/, and code run from src/ loads the compiled worker
// and browser scripts from dist/: build both projects and copy the assets once before any test runs.
// Type errors are reported by `npm run typecheck` (run by .ci/run); tsc still emits JS with them,
// so a half-finished file elsewhere does not stop unrelated tests during development.
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';

export default function setup(): void {
  const root = fileURLToPath(new URL('..', import.meta.url));
  for (const project of ['.', 'tsconfig.browser.json']) {
    const r = spawnSync(process.execPath, ['node_modules/typescript/bin/tsc', '-p', project], {
      cwd: root,
      encoding: 'utf8',
    });
    if (r.status !== 0)
      process.stderr.write(
        `global-setup: tsc -p ${project} reported errors (dist/ still emitted):\n${r.stdout.slice(0, 4000)}\n`,
      );
  }
  // The files tsc does not emit (the EPP's protos, the dashboard's markup and styles).
  const assets = spawnSync('npm', ['run', '--silent', 'build:assets'], { cwd: root, encoding: 'utf8' });
  if (assets.status !== 0) throw new Error(`global-setup: npm run build:assets failed: ${assets.stderr}`);
}
