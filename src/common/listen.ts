// Opening a listening socket, with failures a person can act on. The component that listens knows
// what the socket is for (`role`); the command that started it knows which flag or config key moves
// it and adds that as a hint (withHint), so start-up failures print one line, never a stack.
import type { Server } from 'node:net';

const REASONS: Record<string, string> = {
  EADDRINUSE: 'is already in use',
  EACCES: 'needs privileges this process does not have',
  EADDRNOTAVAIL: 'is not an address of this machine',
};

export class ListenError extends Error {
  constructor(
    /** host:port or endpoint URL that could not be opened. */
    readonly address: string,
    /** What wanted it, e.g. "router HTTP server", "engine-sim 2 ZMQ PUB". */
    readonly role: string,
    /** The errno code (EADDRINUSE, ...). */
    readonly code: string,
    /** How to move it, e.g. "server.port or --port". */
    readonly hint: string | null = null,
  ) {
    const hintText = hint ? `; set ${hint}` : '';
    super(`cannot listen on ${address} for the ${role}: it ${REASONS[code] ?? code}${hintText}`);
    this.name = 'ListenError';
  }

  withHint(hint: string): ListenError {
    return new ListenError(this.address, this.role, this.code, hint);
  }
}

/** A ListenError for an errno error of a bind/listen call; any other error is returned as it is. */
export function asListenError(err: unknown, address: string, role: string): unknown {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === 'string' && code in REASONS ? new ListenError(address, role, code) : err;
}

/** Listen on host:port (0 = ephemeral); a failure to bind rejects with a ListenError. */
export function listenOn(server: Server, port: number, host: string, role: string, hint?: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const onError = (err: Error) => {
      const e = asListenError(err, `${host.includes(':') ? `[${host}]` : host}:${port}`, role);
      reject(e instanceof ListenError && hint ? e.withHint(hint) : e);
    };
    server.once('error', onError);
    server.listen(port, host, () => {
      server.off('error', onError);
      resolve();
    });
  });
}
