// Peer recovery (Dynamo standalone indexer P2P recovery): a replica that starts fetches GET /dump
// from the first peer that answers, restores it, and only then reports ready. The peer list is
// for recovery only; live state comes from KV events (and replica sync) afterwards.
import { request } from 'undici';
import { parseJson } from '../common/json.js';
import type { IndexWriter } from '../indexer/writer.js';
import { indexSnapshotFromJson } from './snapshot-json.js';

/** A peer base URL: http(s)://host[:port][/prefix], no trailing slash. Throws on anything else. */
export function normalizePeerUrl(raw: string): string {
  let u: URL;
  try {
    u = new URL(raw.trim());
  } catch {
    throw new Error(`peer url ${JSON.stringify(raw)} is not a URL`);
  }
  if (u.protocol !== 'http:' && u.protocol !== 'https:')
    throw new Error(`peer url ${JSON.stringify(raw)} must be http(s)`);
  if (u.search || u.hash || u.username || u.password)
    throw new Error(`peer url ${JSON.stringify(raw)} must not carry a query, fragment or credentials`);
  return `${u.origin}${u.pathname.replace(/\/+$/, '')}`;
}

export class PeerList {
  private readonly urls = new Set<string>();

  constructor(initial: readonly string[] = []) {
    for (const u of initial) this.add(u);
  }

  /** Adds a peer; false if it was already listed. Throws on an invalid URL. */
  add(url: string): boolean {
    const u = normalizePeerUrl(url);
    if (this.urls.has(u)) return false;
    this.urls.add(u);
    return true;
  }

  remove(url: string): boolean {
    return this.urls.delete(normalizePeerUrl(url));
  }

  list(): string[] {
    return [...this.urls];
  }
}

export interface RecoveryOptions {
  /** Per-peer timeout for the whole /dump transfer (ms). */
  timeoutMs: number;
  /** Bearer token for peers whose /dump is an admin route. */
  token?: string | null;
  /** This router's own URL, never fetched from. */
  self?: string | null;
  log?: (line: string) => void;
}

export interface RecoveryResult {
  /** The peer the index came from (null: none answered; the replica starts empty). */
  peer: string | null;
  blocks: number;
  namespaces: number;
  errors: Array<{ peer: string; error: string }>;
  ms: number;
}

async function fetchDump(peer: string, opts: RecoveryOptions): Promise<string> {
  const signal = AbortSignal.timeout(opts.timeoutMs);
  const r = await request(`${peer}/dump`, {
    method: 'GET',
    signal,
    headers: opts.token ? { authorization: `Bearer ${opts.token}` } : {},
  });
  const text = await r.body.text();
  if (r.statusCode !== 200) throw new Error(`GET /dump answered ${r.statusCode}: ${text.slice(0, 200)}`);
  return text;
}

/** Restore the index from the first peer that serves a valid dump (peers tried in order). */
export async function recoverFromPeers(
  peers: readonly string[],
  writer: IndexWriter,
  now: () => number,
  opts: RecoveryOptions,
): Promise<RecoveryResult> {
  const t0 = Date.now();
  const errors: RecoveryResult['errors'] = [];
  const self = opts.self ? normalizePeerUrl(opts.self) : null;
  for (const peer of peers) {
    if (peer === self) continue;
    try {
      const snap = indexSnapshotFromJson(parseJson(await fetchDump(peer, opts)));
      const blocks = writer.restore(snap, now());
      opts.log?.(`cluster: recovered ${blocks} blocks in ${snap.namespaces.length} namespaces from ${peer}`);
      return { peer, blocks, namespaces: snap.namespaces.length, errors, ms: Date.now() - t0 };
    } catch (err) {
      const e = err as Error;
      errors.push({ peer, error: e.name === 'TimeoutError' ? `timed out after ${opts.timeoutMs} ms` : e.message });
    }
  }
  if (peers.length > 0)
    opts.log?.(
      `cluster: no peer served a dump (${errors.map((e) => `${e.peer}: ${e.error}`).join('; ')}); starting empty`,
    );
  return { peer: null, blocks: 0, namespaces: 0, errors, ms: Date.now() - t0 };
}
