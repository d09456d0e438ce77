// JetStream plumbing shared by the relay and the routers: the event stream, the snapshot bucket,
// durable consumer names. Both sides may create the stream, so start order does not matter.
import {
  DiscardPolicy,
  type JetStreamManager,
  nanos,
  type NatsConnection,
  type ObjectStore,
  RetentionPolicy,
  StorageType,
  type StreamInfo,
} from 'nats';
import { decodeRelaySnapshot, encodeRelaySnapshot, type RelaySnapshot, SNAPSHOT_OBJECT } from './relay-snapshot.js';

export interface StreamSettings {
  stream: string;
  subject: string;
  /** Messages older than this are dropped by the server (the relay snapshots well within it). */
  maxAgeMs: number;
}

export const DEFAULT_STREAM_MAX_AGE_MS = 60 * 60_000;

function notFound(err: unknown): boolean {
  const e = err as { code?: string; api_error?: { err_code?: number }; message?: string };
  return (
    e?.code === '404' ||
    e?.api_error?.err_code === 10059 ||
    e?.api_error?.err_code === 10014 ||
    /not found/i.test(e?.message ?? '')
  );
}

export async function ensureStream(jsm: JetStreamManager, s: StreamSettings): Promise<StreamInfo> {
  try {
    return await jsm.streams.info(s.stream);
  } catch (err) {
    if (!notFound(err)) throw err;
  }
  try {
    return await jsm.streams.add({
      name: s.stream,
      subjects: [s.subject],
      storage: StorageType.File,
      retention: RetentionPolicy.Limits,
      discard: DiscardPolicy.Old,
      max_age: nanos(s.maxAgeMs),
    });
  } catch (err) {
    // Another process created it first.
    return jsm.streams.info(s.stream).catch(() => Promise.reject(err));
  }
}

export async function snapshotBucket(nc: NatsConnection, bucket: string): Promise<ObjectStore> {
  return nc.jetstream().views.os(bucket, { storage: StorageType.File });
}

export async function loadSnapshot(os: ObjectStore): Promise<RelaySnapshot | null> {
  const data = await os.getBlob(SNAPSHOT_OBJECT);
  return data ? decodeRelaySnapshot(data) : null;
}

export async function storeSnapshot(os: ObjectStore, snap: RelaySnapshot): Promise<number> {
  const data = encodeRelaySnapshot(snap);
  await os.putBlob({ name: SNAPSHOT_OBJECT }, data);
  return data.length;
}

export async function deleteSnapshot(os: ObjectStore): Promise<void> {
  await os.delete(SNAPSHOT_OBJECT).catch((err: unknown) => {
    if (!notFound(err)) throw err;
  });
}

/** Durable consumer name for a router id (JetStream names: no spaces, dots, * > / \). */
export const consumerName = (routerId: string): string => `kvrouter-${routerId.replace(/[^A-Za-z0-9_-]/g, '_')}`;

export { notFound as isNotFound };
