// Open-loop replay: every request leaves at its own arrival time (divided by --rate-scale), whether
// or not earlier ones have finished; follow-up turns leave a think time after their predecessor.
import { setMaxListeners } from 'node:events';
import { Agent } from 'undici';
import type { BenchRequest } from '../workloads/types.js';
import { type Sample, sendStreaming } from './client.js';

export interface ReplayOptions {
  /** Router base URL, or several: request i goes to urls[i % n] (a plain L4 balancer, no stickiness). */
  url: string | readonly string[];
  model: string;
  rateScale: number;
  sessionHeader: string;
  /** A share of the requests (chosen by a fixed hash of their index) sent straight to one engine. */
  bypass?: { fraction: number; url: string; id: string };
  /** Abort whatever is still running this long after the last open-loop arrival (ms). */
  drainTimeoutMs: number;
  onDone?: (s: Sample) => void;
}

export interface ReplayResult {
  samples: Sample[];
  /** Wall time from the first send to the last completion, ms. */
  wallMs: number;
}

/** Whether request i bypasses the router: a fixed hash of its index, the same for every policy. */
export function bypasses(i: number, fraction: number): boolean {
  return (Math.imul(i + 1, 0x9e3779b1) >>> 0) / 4294967296 < fraction;
}

export async function replay(reqs: readonly BenchRequest[], o: ReplayOptions): Promise<ReplayResult> {
  const dispatcher = new Agent({
    connections: null,
    pipelining: 1,
    headersTimeout: 0,
    bodyTimeout: 0,
    keepAliveTimeout: 30_000,
  });
  const abort = new AbortController();
  setMaxListeners(0, abort.signal); // one signal aborts every in-flight request at the deadline
  const followers = new Map<number, number[]>();
  for (let i = 0; i < reqs.length; i++) {
    const a = reqs[i].after;
    if (a) followers.set(a.index, [...(followers.get(a.index) ?? []), i]);
  }
  const urls = typeof o.url === 'string' ? [o.url] : o.url;
  const samples: Sample[] = new Array(reqs.length);
  const t0 = performance.now();
  let remaining = reqs.length;
  let lastEnd = 0;
  let drainTimer: NodeJS.Timeout | null = null;
  let resolveAll!: () => void;
  const all = new Promise<void>((r) => (resolveAll = r));

  const send = (i: number, due: number) => {
    const r = reqs[i];
    const sentAt = performance.now() - t0;
    const body = JSON.stringify({
      model: o.model,
      stream: true,
      stream_options: { include_usage: true },
      max_tokens: r.maxTokens,
      ...r.body(),
    });
    const headers: Record<string, string> = r.sessionKey ? { [o.sessionHeader]: r.sessionKey } : {};
    const bypassed = o.bypass !== undefined && bypasses(i, o.bypass.fraction);
    const base = bypassed ? o.bypass!.url : urls[i % urls.length];
    void sendStreaming({ dispatcher, url: `${base}${r.path}`, body, headers, signal: abort.signal }).then((res) => {
      const s: Sample = {
        index: i,
        sentAt,
        lagMs: Math.max(0, sentAt - due),
        ...res,
        ...(bypassed ? { instance: o.bypass!.id, bypassed: true } : {}),
      };
      samples[i] = s;
      lastEnd = Math.max(lastEnd, sentAt + res.e2eMs);
      o.onDone?.(s);
      for (const f of followers.get(i) ?? []) {
        const wait = reqs[f].after!.thinkMs / o.rateScale;
        const at = performance.now() - t0 + wait;
        setTimeout(() => send(f, at), wait);
      }
      if (--remaining === 0) resolveAll();
    });
  };

  // Open-loop arrivals in time order, released by one timer chain.
  const open = reqs
    .map((r, i) => ({ i, at: r.atMs / o.rateScale }))
    .filter((x) => reqs[x.i].after === null)
    .sort((a, b) => a.at - b.at);
  let next = 0;
  const tick = () => {
    const now = performance.now() - t0;
    while (next < open.length && open[next].at <= now) {
      send(open[next].i, open[next].at);
      next++;
    }
    if (next < open.length) setTimeout(tick, Math.max(0, open[next].at - (performance.now() - t0)));
    else drainTimer = setTimeout(() => abort.abort(), o.drainTimeoutMs);
  };
  tick();
  await all;
  if (drainTimer) clearTimeout(drainTimer);
  await dispatcher.close().catch(() => undefined);
  return { samples, wallMs: lastEnd };
}
