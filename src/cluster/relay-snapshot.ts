// The relay's index snapshot in the JetStream object store: the index dump, the backend bindings,
// and the stream sequence it covers (apply messages after stream_seq on top of it).
import { parseJson, stringifyJson } from '../common/json.js';
import type { IndexSnapshot } from '../indexer/snapshot.js';
import { asObj, int } from './codec.js';
import { indexSnapshotFromJson } from './snapshot-json.js';

export interface RelaySnapshot {
  version: 1;
  relay: string;
  /** Last stream sequence reflected in the index (0: none). */
  stream_seq: number;
  created_at: number;
  bindings: Array<[string, string | null]>;
  index: IndexSnapshot;
}

export const SNAPSHOT_OBJECT = 'index';

export const encodeRelaySnapshot = (s: RelaySnapshot): Uint8Array => new TextEncoder().encode(stringifyJson(s));

export function decodeRelaySnapshot(data: Uint8Array): RelaySnapshot {
  const o = asObj(parseJson(new TextDecoder().decode(data)), 'snapshot');
  if (o.version !== 1) throw new Error(`unsupported relay snapshot version ${String(o.version)}`);
  if (!Array.isArray(o.bindings)) throw new Error('bindings must be an array');
  const bindings = o.bindings.map((b): [string, string | null] => {
    if (!Array.isArray(b) || typeof b[0] !== 'string' || (b[1] !== null && typeof b[1] !== 'string'))
      throw new Error('bindings[] must be [backend, instance|null]');
    return [b[0], b[1]];
  });
  return {
    version: 1,
    relay: typeof o.relay === 'string' ? o.relay : '',
    stream_seq: int(o, 'stream_seq'),
    created_at: typeof o.created_at === 'number' ? o.created_at : 0,
    bindings,
    index: indexSnapshotFromJson(o.index as Parameters<typeof indexSnapshotFromJson>[0]),
  };
}
