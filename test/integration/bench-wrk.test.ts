// `bench overhead --loadgen wrk`: the real wrk against real local servers (it rotates the bodies,
// sends the headers, splits the connections over the URLs' origins, counts non-2xx as errors), and
// the parser on wrk's own output.
import { chmodSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { AddressInfo } from 'node:net';
import { afterAll, describe, expect, it } from 'vitest';
import { startNginxStubs, nginxStubConf, stubAnswers } from '../../src/bench/overhead/nginx.js';
import { findWrk, luaLong, parseWrk, WrkLoad, wrkScript } from '../../src/bench/overhead/wrk.js';

const SAMPLE = `Running 2s test @ http://127.0.0.1:40123
  1 threads and 16 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     2.31ms  812.40us  14.02ms   81.20%
    Req/Sec     6.95k   301.12     7.40k    70.00%
  Latency Distribution
     50%    2.12ms
     75%    2.58ms
     90%    3.03ms
     99%    1.20s
  13836 requests in 2.10s, 6.86MB read
  Socket errors: connect 0, read 2, write 0, timeout 1
  Non-2xx or 3xx responses: 4
Requests/sec:   6588.57
Transfer/sec:      3.27MB
0m0.003s 0m0.001s
0m0.214s 0m1.306s
`;

describe('wrk output', () => {
  it("reads requests, time, errors, percentiles and wrk's own CPU", () => {
    expect(parseWrk(SAMPLE)).toEqual({
      requests: 13836,
      seconds: 2.1,
      non2xx: 4,
      socketErrors: 3,
      p50Ms: 2.12,
      p90Ms: 3.03,
      p99Ms: 1200,
      cpuSeconds: 1.52,
    });
    expect(() => parseWrk('0m0.000s 0m0.000s\n0m0.001s 0m0.000s\n')).toThrow(/no summary/);
  });

  it('holds any body verbatim in the script', () => {
    const s = wrkScript('/v1/completions', ['{"a":"]]"}', '{"b":"]=]"}'], { 'x-k': 'v' });
    expect(s).toContain('[=[\n{"a":"]]"}]=]');
    expect(s).toContain('[[\n{"b":"]=]"}]]');
    expect(s).toContain('wrk.headers[([[\nx-k]])] = [[\nv]]');
    // A text ending in `]` would close the bracket early at level 0.
    expect(luaLong('x]')).toBe('[=[\nx]]=]');
    expect(luaLong('x]=')).toBe('[[\nx]=]]');
  });
});

describe('nginx stub upstreams', () => {
  it('answer what the Node stub answers, escaped for nginx', () => {
    const a = stubAnswers('m');
    expect(
      a.completions
        .split('\n\n')
        .filter(Boolean)
        .map((l) => l.slice(6)),
    ).toHaveLength(3);
    expect(JSON.parse(a.chat.split('\n\n')[0].slice(6)).choices[0].delta.content).toBe(' hello');
    const conf = nginxStubConf('/tmp/x', [1, 2], 'm');
    expect(conf).toContain('listen 127.0.0.1:2 backlog=4096;');
    expect(conf).toContain('return 200 "data: {\\"id\\":\\"cmpl-1\\"');
    expect(conf).not.toMatch(/return 200 "[^"]*\n/); // no raw newline inside a string
    // Every temporary file nginx may write stays in the run's directory.
    for (const d of ['client_body', 'proxy', 'fastcgi', 'uwsgi', 'scgi'])
      expect(conf).toMatch(new RegExp(`^  ${d}_temp_path /tmp/x/`, 'm'));
  });

  it('a start that fails says why and leaves no directory behind', async () => {
    const bin = join(mkdtempSync(join(tmpdir(), 'fake-nginx-')), 'nginx');
    writeFileSync(bin, '#!/bin/sh\necho "nginx: [emerg] something is wrong" >&2\nexit 1\n');
    chmodSync(bin, 0o755);
    const before = readdirSync(tmpdir()).filter((f) => f.startsWith('kvrouter-nginx-stubs-')).length;
    try {
      await expect(startNginxStubs(bin, 2, 'm')).rejects.toThrow(/exited \(1\).*something is wrong/s);
      expect(readdirSync(tmpdir()).filter((f) => f.startsWith('kvrouter-nginx-stubs-')).length).toBe(before);
    } finally {
      rmSync(join(bin, '..'), { recursive: true, force: true });
    }
  });
});

const bin = findWrk();

describe.skipIf(!bin)('WrkLoad against local servers', () => {
  const servers: Server[] = [];
  afterAll(async () => {
    for (const s of servers) await new Promise((r) => s.close(r));
  });
  const serve = async (
    status: number,
    seen: Array<{ method: string; url: string; header: string | undefined; body: string }>,
  ) => {
    const s = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        seen.push({
          method: req.method!,
          url: req.url!,
          header: req.headers['x-test'] as string | undefined,
          body: Buffer.concat(chunks).toString(),
        });
        res.writeHead(status, { 'content-type': 'text/plain' }).end('ok');
      });
    });
    s.keepAliveTimeout = 60_000;
    servers.push(s);
    await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
    return `http://127.0.0.1:${(s.address() as AddressInfo).port}`;
  };

  it('rotates the bodies over every origin with the headers, and counts what completed', async () => {
    const a: Parameters<typeof serve>[1] = [];
    const b: Parameters<typeof serve>[1] = [];
    const urls = [`${await serve(200, a)}/v1/completions`, `${await serve(200, b)}/v1/completions`];
    const bodies = ['{"n":1,"s":"]]"}', '{"n":2}', '\n["ends in a bracket"]'];
    const wrk = new WrkLoad(bin!);
    try {
      const r = await wrk.run({
        type: 'closed',
        spec: { urls, bodies, headers: { 'x-test': 'yes' } },
        concurrency: 3,
        warmupMs: 0,
        durationMs: 1000,
      });
      const seen = [...a, ...b];
      expect(r.errors).toBe(0);
      expect(r.completed).toBeGreaterThan(100);
      // Requests cut by the end of the run reached a server but were not counted.
      expect(seen.length).toBeGreaterThanOrEqual(r.completed);
      expect(seen.length).toBeLessThanOrEqual(r.completed + 3);
      expect(a.length).toBeGreaterThan(0);
      expect(b.length).toBeGreaterThan(0);
      expect(new Set(seen.map((x) => `${x.method} ${x.url} ${x.header}`))).toEqual(
        new Set(['POST /v1/completions yes']),
      );
      expect(new Set(seen.map((x) => x.body))).toEqual(new Set(bodies));
      expect(r.seconds).toBeGreaterThanOrEqual(0.9);
      expect(r.cpuSeconds).toBeGreaterThan(0);
      expect(r.latencyDist!.p50).toBeGreaterThan(0);
    } finally {
      wrk.stop();
    }
  });

  it('says why wrk failed, and keeps one connection per step of one', async () => {
    const wrk = new WrkLoad(bin!);
    const seen: Parameters<typeof serve>[1] = [];
    const free = await serve(200, seen);
    await new Promise((r) => servers.pop()!.close(r)); // nothing listens there now
    try {
      await expect(
        wrk.run({
          type: 'closed',
          spec: { urls: [`${free}/x`], bodies: ['{}'], headers: {} },
          concurrency: 1,
          warmupMs: 0,
          durationMs: 1000,
        }),
      ).rejects.toThrow(/wrk failed .*(connect|refused)/i);
      const a: Parameters<typeof serve>[1] = [];
      const b: Parameters<typeof serve>[1] = [];
      const r = await wrk.run({
        type: 'closed',
        spec: { urls: [`${await serve(200, a)}/x`, `${await serve(200, b)}/x`], bodies: ['{}'], headers: {} },
        concurrency: 1,
        warmupMs: 0,
        durationMs: 1000,
      });
      expect(r.completed).toBeGreaterThan(0);
      expect(b).toHaveLength(0); // one connection: the first origin only
    } finally {
      wrk.stop();
    }
  });

  it('counts non-2xx answers as errors, not completions', async () => {
    const seen: Parameters<typeof serve>[1] = [];
    const wrk = new WrkLoad(bin!);
    try {
      const r = await wrk.run({
        type: 'closed',
        spec: { urls: [`${await serve(503, seen)}/x`], bodies: ['{}'], headers: {} },
        concurrency: 1,
        warmupMs: 0,
        durationMs: 1000,
      });
      expect(r.completed).toBe(0);
      expect(r.errors).toBeGreaterThan(10);
      expect(r.firstError).toMatch(/non-2xx/);
    } finally {
      wrk.stop();
    }
  });
});
