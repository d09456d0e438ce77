// Start-up failures print one line naming the port, what wanted it and how to move it, and exit
// non-zero; no stack trace. Each case holds a real port on loopback and starts the real CLI.
import { createServer, type Server } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { POLICY_NAMES } from '../../src/scheduler/policies/registry.js';
import { runCli } from '../helpers/procs.js';

let holder: Server;
let taken: number;

beforeAll(async () => {
  holder = createServer();
  await new Promise<void>((r) => holder.listen(0, '127.0.0.1', r));
  taken = (holder.address() as { port: number }).port;
});
afterAll(() => new Promise<void>((r) => holder.close(() => r())));

function expectOneLine(r: { code: number | null; stderr: string }, pattern: RegExp): void {
  expect(r.code, r.stderr).toBe(1);
  const lines = r.stderr.trim().split('\n');
  expect(lines, r.stderr).toHaveLength(1);
  expect(lines[0]).toMatch(pattern);
  expect(r.stderr).not.toMatch(/\n\s+at /); // no stack frames
}

describe('a taken port is one clear line and a non-zero exit', () => {
  it('kvrouter serve: the router port names server.port', async () => {
    const r = await runCli([
      'serve',
      '--config',
      'router.example.yaml',
      '--no-watch',
      '--port',
      String(taken),
      '--set',
      'engine_sim.count=0',
      '--set',
      'models.0.instances.0.id=a',
      '--set',
      'models.0.instances.0.url=http://127.0.0.1:1',
    ]);
    expectOneLine(
      r,
      new RegExp(
        `^kvrouter serve: cannot listen on 127\\.0\\.0\\.1:${taken} for the router HTTP server: it is already in use; set server\\.port`,
      ),
    );
  });

  it('kvrouter serve: an embedded engine port names engine_sim.port', async () => {
    // Engine 1 of two takes port + 1: hold that one. Engine 0's port, one below, must be free; on a
    // shared machine another process may hold it, and then the run is tried with another port.
    for (let attempt = 1; ; attempt++) {
      const r = await runCli([
        'serve',
        '--config',
        'router.example.yaml',
        '--no-watch',
        '--port',
        '0',
        '--set',
        'engine_sim.count=2',
        '--set',
        `engine_sim.port=${taken - 1}`,
        '--set',
        'engine_sim.zmq_port=0',
        '--set',
        'engine_sim.replay_port=0',
      ]);
      if (attempt < 4 && r.stderr.includes(`127.0.0.1:${taken - 1} `)) {
        await new Promise<void>((res) => holder.close(() => res()));
        holder = createServer();
        await new Promise<void>((res) => holder.listen(0, '127.0.0.1', res));
        taken = (holder.address() as { port: number }).port;
        continue;
      }
      expectOneLine(
        r,
        new RegExp(
          `^kvrouter serve: cannot listen on 127\\.0\\.0\\.1:${taken} for the simulated engine's HTTP server: it is already in use; set engine_sim\\.port`,
        ),
      );
      return;
    }
  });

  it('kvrouter engine-sim: HTTP and ZMQ ports name their flags', async () => {
    const http = await runCli(['engine-sim', '--port', String(taken), '--zmq-port', '0', '--replay-port', '0']);
    expectOneLine(
      http,
      new RegExp(
        `^kvrouter engine-sim: cannot listen on 127\\.0\\.0\\.1:${taken} .*HTTP server: it is already in use; set --port`,
      ),
    );
    const zmq = await runCli(['engine-sim', '--port', '0', '--zmq-port', String(taken), '--replay-port', '0']);
    expectOneLine(
      zmq,
      new RegExp(
        `^kvrouter engine-sim: cannot listen on tcp://127\\.0\\.0\\.1:${taken} .*PUB socket: it is already in use; set --zmq-port`,
      ),
    );
    const replay = await runCli(['engine-sim', '--port', '0', '--zmq-port', '0', '--replay-port', String(taken)]);
    expectOneLine(
      replay,
      new RegExp(
        `^kvrouter engine-sim: cannot listen on tcp://127\\.0\\.0\\.1:${taken} .*replay socket: it is already in use; set --replay-port`,
      ),
    );
  });

  it('kvrouter indexer: the port names --port', async () => {
    const r = await runCli(['indexer', '--port', String(taken)]);
    expectOneLine(
      r,
      new RegExp(
        `^kvrouter indexer: cannot listen on 127\\.0\\.0\\.1:${taken} for the indexer HTTP server: it is already in use; set --port`,
      ),
    );
  });

  it('a bad config names the file and each bad key, without a stack', async () => {
    const r = await runCli(['serve', '--config', 'router.example.yaml', '--no-watch', '--set', 'routing.policy=nope']);
    expect(r.code).toBe(2);
    expect(r.stderr.trim().split('\n'), r.stderr).toEqual([
      'kvrouter serve: router.example.yaml: invalid configuration',
      `  routing.policy: must be one of ${POLICY_NAMES.join(', ')}, got "nope"`,
    ]);
  });
});
