#!/usr/bin/env node
// Thin launcher: the CLI is compiled from src/ to dist/ by `npm run build` (run by `npm ci`).
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const main = fileURLToPath(new URL('../dist/cli/main.js', import.meta.url));
if (!existsSync(main)) {
  process.stderr.write('kvrouter: dist/ is missing; run `npm run build` (npm ci does it for you)\n');
  process.exit(1);
}
const { runCli } = await import(main);
const code = await runCli(process.argv.slice(2));
// A failed start may leave sockets open (listeners, NATS) that would keep the process alive.
if (code !== 0) process.exit(code);
