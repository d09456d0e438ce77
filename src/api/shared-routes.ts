// Which POST routes the `serve --workers` processes of one router share, declared where each route
// is mounted (`app.post(shared.replicated('/register'), ...)`): the table is whatever the mounts
// declared, so a new route states its sharing in the line that adds it.

/**
 * - `replicated`: changes what every process must agree on (registrations, index writes, peers,
 *   config): once this process accepted it (2xx), the others apply it too.
 * - `booking-call`: acts on a booking, which only the process that made it holds: a 404 here is
 *   asked of the others.
 */
export type Sharing = 'replicated' | 'booking-call';

export interface SharedRoute {
  /** Hono syntax: `:name` stands for one path segment. */
  path: string;
  sharing: Sharing;
}

export class SharedRoutes {
  private readonly declared: SharedRoute[] = [];
  private readonly exact = new Map<string, Sharing>();
  private readonly patterns: Array<{ re: RegExp; sharing: Sharing }> = [];

  /** Declare `path` replicated; returns it (with its literal type, so hono still types its params). */
  replicated<P extends string>(path: P): P {
    return this.declare(path, 'replicated');
  }

  /** Declare `path` a booking call; returns it. */
  bookingCall<P extends string>(path: P): P {
    return this.declare(path, 'booking-call');
  }

  /** The sharing of a request path (no query), or null for a route each process serves alone. */
  sharingOf(path: string): Sharing | null {
    const s = this.exact.get(path);
    if (s) return s;
    for (const p of this.patterns) if (p.re.test(path)) return p.sharing;
    return null;
  }

  /** Every declaration, in mount order (the table docs and tests read). */
  list(): readonly SharedRoute[] {
    return this.declared;
  }

  private declare<P extends string>(path: P, sharing: Sharing): P {
    this.declared.push({ path, sharing });
    if (!path.includes(':')) this.exact.set(path, sharing);
    else {
      const re = path
        .split('/')
        .map((seg) => (seg.startsWith(':') ? '[^/]+' : seg.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')))
        .join('/');
      this.patterns.push({ re: new RegExp(`^${re}$`), sharing });
    }
    return path;
  }
}
