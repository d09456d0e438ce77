// Listener flags shared by `kvrouter indexer` and `kvrouter relay` (the router reads `kv_events:`).
import { ZMQ_CLIENTS, type ZmqClient } from '../events/sub-transport.js';
import { DEFAULT_LISTENER_OPTIONS, type ListenerOptions } from '../events/zmq-listener.js';
import { intOption, type OptionTable, type ParsedOptions } from '../common/args.js';

export const LISTENER_FLAGS: OptionTable = {
  'zmq-client': {
    type: 'string',
    arg: 'C',
    help: `KV-event SUB implementation: ${ZMQ_CLIENTS.join(', ')} (default ${DEFAULT_LISTENER_OPTIONS.zmqClient}; builtin covers tcp:// and ipc://)`,
  },
  'disconnect-purge-ms': {
    type: 'string',
    arg: 'MS',
    help: `purge a stream disconnected this long, 0 = never (default ${DEFAULT_LISTENER_OPTIONS.disconnectPurgeMs})`,
  },
  'heartbeat-ms': {
    type: 'string',
    arg: 'MS',
    help: `ZMTP heartbeat interval, 0 = off (default ${DEFAULT_LISTENER_OPTIONS.heartbeatMs})`,
  },
};

/** Flags over `base` (defaults, or the config file's kv_events). Throws a flag-naming error. */
export function listenerOptionsFromFlags(
  v: ParsedOptions,
  base: ListenerOptions = { ...DEFAULT_LISTENER_OPTIONS },
): ListenerOptions {
  const out = { ...base };
  const client = v['zmq-client'];
  if (typeof client === 'string') {
    if (!(ZMQ_CLIENTS as readonly string[]).includes(client))
      throw new Error(`--zmq-client must be one of ${ZMQ_CLIENTS.join(', ')}, got ${client}`);
    out.zmqClient = client as ZmqClient;
  }
  const ms = (flag: string): number | undefined => {
    if (typeof v[flag] !== 'string') return undefined;
    const n = intOption(v, flag);
    if (n < 0) throw new Error(`--${flag} must be >= 0, got ${n}`);
    return n;
  };
  out.disconnectPurgeMs = ms('disconnect-purge-ms') ?? out.disconnectPurgeMs;
  out.heartbeatMs = ms('heartbeat-ms') ?? out.heartbeatMs;
  if (out.heartbeatMs > 20_000)
    throw new Error(`--heartbeat-ms must be <= 20000 (libzmq's PING TTL limit), got ${out.heartbeatMs}`);
  return out;
}
