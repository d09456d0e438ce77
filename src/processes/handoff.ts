// The connections node:cluster has handed to a router process and that it has not acknowledged.
// node:cluster's round robin accepts each connection in the primary, sends its handle to one
// process (`newconn`) and closes its own copy only when that process answers: a process that dies
// first never answers, and the primary keeps the connection open with nobody to serve it. Its
// client then hangs until its own timeout (Node leaves it so: nodejs/node-v0.x-archive#7928).
// Closing the primary's copy when the process dies ends that connection at once (a reset: the
// request was never read); a connection the process did take is not affected (its copy stays).
import type { ChildProcess } from 'node:child_process';

interface Closable {
  close(): void;
}

/** node:cluster's internal messages, as the primary sends and receives them (internal/cluster/utils.js). */
interface ClusterMessage {
  cmd: 'NODE_CLUSTER';
  act?: string;
  seq?: number;
  ack?: number;
}

const isClusterMessage = (m: unknown): m is ClusterMessage =>
  typeof m === 'object' && m !== null && (m as { cmd?: unknown }).cmd === 'NODE_CLUSTER';
const isClosable = (h: unknown): h is Closable =>
  typeof h === 'object' && h !== null && typeof (h as Closable).close === 'function';

export interface Handoffs {
  /** Close the connections handed to the process and not acknowledged (call when it has died): how many. */
  closeUnacknowledged(): number;
}

/**
 * Watch the connections handed to a forked process (call right after `cluster.fork()`, before it
 * listens). Relies on the shape of node:cluster's internal messages; if a Node version changes
 * them, nothing is tracked and nothing is closed (Node's own behaviour).
 */
export function trackHandoffs(child: ChildProcess): Handoffs {
  const inFlight = new Map<number, Closable>();
  const send = child.send;
  // node:cluster hands a connection with `proc.send({ cmd: 'NODE_CLUSTER', act: 'newconn', seq, key }, handle)`.
  child.send = function (this: ChildProcess, ...args: unknown[]): boolean {
    const [message, handle] = args;
    if (isClusterMessage(message) && message.act === 'newconn' && typeof message.seq === 'number' && isClosable(handle))
      inFlight.set(message.seq, handle);
    return Reflect.apply(send, this, args) as boolean;
  } as ChildProcess['send'];
  // The process answers `{ cmd: 'NODE_CLUSTER', ack: seq, accepted }`; either way the primary then disposes of the handle.
  child.on('internalMessage', (m: unknown) => {
    if (isClusterMessage(m) && typeof m.ack === 'number') inFlight.delete(m.ack);
  });
  return {
    closeUnacknowledged() {
      const n = inFlight.size;
      // Closing a handle twice is harmless, should node:cluster still get an answer and close it too.
      for (const h of inFlight.values()) h.close();
      inFlight.clear();
      return n;
    },
  };
}
