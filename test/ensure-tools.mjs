#!/usr/bin/env node
// First step of `npm test`: make sure the programs the integration tests run exist.
// - nats-server (replica sync, relay and lease tests): NATS_SERVER_BIN, else `nats-server` on PATH;
// - chromium (dashboard test, driven by playwright-core): CHROMIUM_BIN, else chromium on PATH;
// - wrk (`bench overhead --loadgen wrk`, bench-wrk.test.ts): WRK_BIN, else `wrk` on PATH.
// What is missing is installed from Debian's packages when we are root with apt-get; otherwise we
// stop with one line naming what to install, before any test runs. Plain JS: it runs before tsc.
import { spawnSync } from 'node:child_process';
import { accessSync, constants } from 'node:fs';
import { delimiter, join } from 'node:path';

const TOOLS = [
  { name: 'nats-server', env: 'NATS_SERVER_BIN', commands: ['nats-server'], pkg: 'nats-server' },
  { name: 'chromium', env: 'CHROMIUM_BIN', commands: ['chromium', 'chromium-browser'], pkg: 'chromium' },
  { name: 'wrk', env: 'WRK_BIN', commands: ['wrk'], pkg: 'wrk' },
];

const executable = (p) => {
  try {
    accessSync(p, constants.X_OK);
    return true;
  } catch {
    return false;
  }
};
const onPath = (cmd) =>
  (process.env.PATH ?? '')
    .split(delimiter)
    .filter(Boolean)
    .map((d) => join(d, cmd))
    .find(executable) ?? null;

/** Where the tool is, or null; a variable that points nowhere is an error (the user asked for it). */
function find(tool) {
  const pinned = process.env[tool.env];
  if (pinned) {
    if (executable(pinned)) return pinned;
    fail(`${tool.env}=${pinned} is not an executable file: point it at ${tool.name} or unset it`);
  }
  for (const c of tool.commands) {
    const p = onPath(c);
    if (p) return p;
  }
  return null;
}

function fail(line) {
  process.stderr.write(`npm test: ${line}\n`);
  process.exit(1);
}

const missing = TOOLS.filter((t) => find(t) === null);
if (missing.length > 0) {
  const pkgs = missing.map((t) => t.pkg);
  const how = `install ${missing.map((t) => t.name).join(' and ')} (Debian: apt-get install ${pkgs.join(' ')}) or set ${missing.map((t) => t.env).join(' / ')}`;
  const root = typeof process.getuid === 'function' && process.getuid() === 0;
  if (!root || onPath('apt-get') === null)
    fail(
      `the tests need ${missing.map((t) => t.name).join(' and ')}, which ${missing.length > 1 ? 'are' : 'is'} missing and cannot be installed here (${root ? 'no apt-get' : 'not root'}): ${how}`,
    );
  process.stderr.write(`npm test: installing ${pkgs.join(' ')} from Debian packages (apt-get, once)\n`);
  const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
  for (const args of [
    ['update', '-qq'],
    ['install', '-y', '-qq', ...pkgs],
  ]) {
    const r = spawnSync('apt-get', args, { stdio: ['ignore', 'ignore', 'inherit'], env });
    if (r.status !== 0) fail(`apt-get ${args[0]} failed (exit ${r.status ?? r.signal}): ${how}`);
  }
  const still = missing.filter((t) => find(t) === null);
  if (still.length > 0) fail(`apt-get ran but ${still.map((t) => t.name).join(' and ')} is still not found: ${how}`);
}
for (const t of TOOLS) process.stderr.write(`npm test: ${t.name} = ${find(t)}\n`);
