// Instances as the gateway names them: "ip:port" (Envoy's original-destination cluster connects to
// exactly that address). IP literals are taken as they are; a host name (a StatefulSet pod's DNS
// name) is resolved and re-resolved when its answer is older than `ttlMs`, so a restarted pod's new
// IP is picked up. unix:// instances have no address a gateway can reach: they are never picked.
import { lookup } from 'node:dns/promises';
import { isIP } from 'node:net';

export type Lookup = (host: string) => Promise<string>;

const defaultLookup: Lookup = async (host) => (await lookup(host)).address;

interface Parsed {
  host: string;
  port: string;
}

function parse(url: string): Parsed | null {
  if (!/^https?:\/\//.test(url)) return null;
  try {
    const u = new URL(url);
    return { host: u.hostname.replace(/^\[|\]$/g, ''), port: u.port || (u.protocol === 'https:' ? '443' : '80') };
  } catch {
    return null;
  }
}

const join = (ip: string, port: string) => (isIP(ip) === 6 ? `[${ip}]:${port}` : `${ip}:${port}`);

export class EndpointAddresses {
  /** Host name -> its IP (null: never resolved) and when that was asked. */
  private readonly resolved = new Map<string, { ip: string | null; at: number }>();
  private readonly pending = new Map<string, Promise<void>>();

  constructor(
    private readonly now: () => number,
    private readonly ttlMs = 5000,
    private readonly resolve: Lookup = defaultLookup,
  ) {}

  /** The gateway's name for an upstream URL, or null (unix socket, unresolvable host). */
  addressOf(url: string): string | null {
    const p = parse(url);
    if (!p) return null;
    const ip = isIP(p.host) ? p.host : (this.resolved.get(p.host)?.ip ?? null);
    return ip === null ? null : join(ip, p.port);
  }

  /** Resolve the host names among `urls` that are unknown or stale (IP literals cost nothing). */
  async refresh(urls: Iterable<string>): Promise<void> {
    const waits: Promise<void>[] = [];
    for (const url of urls) {
      const p = parse(url);
      if (!p || isIP(p.host)) continue;
      const known = this.resolved.get(p.host);
      if (known && this.now() - known.at < this.ttlMs) continue;
      const host = p.host;
      let w = this.pending.get(host);
      if (!w) {
        w = this.resolve(host)
          .catch(() => null)
          // A failed lookup keeps the previous answer: a DNS blip must not empty the pool.
          .then((ip) => void this.resolved.set(host, { ip: ip ?? this.resolved.get(host)?.ip ?? null, at: this.now() }))
          .finally(() => this.pending.delete(host));
        this.pending.set(host, w);
      }
      // A known (stale) answer serves at once and is refreshed behind; only an unknown host waits.
      if (!known) waits.push(w);
    }
    await Promise.all(waits);
  }
}
