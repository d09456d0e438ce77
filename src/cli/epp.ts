// `kvrouter epp`: `kvrouter serve --epp`, the router with the Gateway API Inference Extension
// endpoint picker beside it (docs/gateway.md). The flags are GIE's; the gRPC code is loaded only
// with --epp, so a plain `serve` never pays for it.
import { intOption, type OptionTable, type ParsedOptions } from '../common/args.js';
import type { EppOptions } from '../epp/server.js';

export const EPP_OPTIONS: OptionTable = {
  epp: {
    type: 'boolean',
    help: 'also serve the Gateway API Inference Extension endpoint picker (Envoy ext_proc over gRPC, docs/gateway.md); `kvrouter epp` implies it',
  },
  'grpc-port': {
    type: 'string',
    arg: 'PORT',
    help: 'with --epp: the ext_proc gRPC port (default 9002; 0 = any free port); on server.host',
  },
  'grpc-health-port': {
    type: 'string',
    arg: 'PORT',
    help: 'with --epp: the gRPC health port (liveness, readiness, the ext_proc service; default 9003)',
  },
  'pool-name': {
    type: 'string',
    arg: 'NAME',
    help: 'with --epp: the InferencePool served, for logs and metrics labels (default kvrouter)',
  },
  'pool-namespace': { type: 'string', arg: 'NS', help: "with --epp: the InferencePool's namespace (default default)" },
};

function port(v: ParsedOptions, name: string, dflt: number): number | string {
  if (v[name] === undefined) return dflt;
  try {
    const n = intOption(v, name);
    if (n >= 0 && n <= 65535) return n;
  } catch {
    /* not an integer: the message below */
  }
  return `--${name} must be a port number (0-65535), got ${String(v[name])}`;
}

/** The picker's options (host aside), null without --epp, or a message for a bad command line. */
export function eppOptions(v: ParsedOptions, implied: boolean): Omit<EppOptions, 'host'> | null | { error: string } {
  const on = implied || v.epp === true;
  if (!on) {
    const stray = Object.keys(EPP_OPTIONS).find((k) => k !== 'epp' && v[k] !== undefined);
    return stray ? { error: `--${stray} needs --epp (or \`kvrouter epp\`)` } : null;
  }
  const grpcPort = port(v, 'grpc-port', 9002);
  const healthPort = port(v, 'grpc-health-port', 9003);
  if (typeof grpcPort === 'string') return { error: grpcPort };
  if (typeof healthPort === 'string') return { error: healthPort };
  const name = (v['pool-name'] as string | undefined) ?? 'kvrouter';
  const ns = (v['pool-namespace'] as string | undefined) ?? 'default';
  for (const [flag, s] of [
    ['pool-name', name],
    ['pool-namespace', ns],
  ] as const) {
    // Kubernetes object names (RFC 1123 labels, up to 253 characters with dots).
    if (!/^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$/.test(s))
      return { error: `--${flag} must be a Kubernetes name (lower-case letters, digits, '-', '.'), got ${s}` };
  }
  return { grpcPort, healthPort, poolName: name, poolNamespace: ns };
}

export async function run(argv: string[]): Promise<number> {
  const serve = await import('./serve.js');
  return serve.run(argv, 'epp');
}
