// Which ZMQ endpoints /register may point listeners at: IPv4/IPv6 CIDRs and host patterns
// (`*.example.com`). Loopback only by default, so a caller cannot make the router connect anywhere.
import { isIP } from 'node:net';

export const DEFAULT_REGISTER_ALLOWLIST = ['127.0.0.0/8', '::1/128', 'localhost'];

function ipv4ToInt(ip: string): number {
  return ip.split('.').reduce((a, p) => (a << 8) + Number(p), 0) >>> 0;
}

function ipv6ToBig(ip: string): bigint {
  const [head, tail] = ip.split('::');
  const parse = (s: string) => (s ? s.split(':') : []);
  let parts = parse(head);
  const tailParts = tail !== undefined ? parse(tail) : [];
  if (tail !== undefined) parts = [...parts, ...new Array(8 - parts.length - tailParts.length).fill('0'), ...tailParts];
  return parts.reduce((a, p) => (a << 16n) + BigInt(parseInt(p || '0', 16)), 0n);
}

function inCidr(ip: string, cidr: string): boolean {
  const [base, bitsRaw] = cidr.split('/');
  const fam = isIP(ip);
  if (fam !== isIP(base)) return false;
  if (fam === 4) {
    const bits = bitsRaw === undefined ? 32 : Number(bitsRaw);
    const mask = bits === 0 ? 0 : (~0 << (32 - bits)) >>> 0;
    return (ipv4ToInt(ip) & mask) === (ipv4ToInt(base) & mask);
  }
  const bits = BigInt(bitsRaw === undefined ? 128 : Number(bitsRaw));
  const mask = bits === 0n ? 0n : ((1n << 128n) - 1n) ^ ((1n << (128n - bits)) - 1n);
  return (ipv6ToBig(ip) & mask) === (ipv6ToBig(base) & mask);
}

function hostMatches(host: string, pattern: string): boolean {
  if (pattern.startsWith('*.')) return host.toLowerCase().endsWith(pattern.slice(1).toLowerCase());
  return host.toLowerCase() === pattern.toLowerCase();
}

/** Host of a ZMQ endpoint (tcp://host:port); ipc:// and inproc:// are local and have none. */
export function endpointHost(endpoint: string): string | null {
  const m = /^tcp:\/\/(\[[^\]]+\]|[^:]+):\d+$/.exec(endpoint);
  if (!m) return null;
  return m[1].replace(/^\[|\]$/g, '');
}

export function endpointAllowed(endpoint: string, allowlist: readonly string[]): boolean {
  if (endpoint.startsWith('ipc://') || endpoint.startsWith('inproc://')) return true;
  const host = endpointHost(endpoint);
  if (host === null) return false;
  for (const rule of allowlist) {
    if (isIP(rule.split('/')[0]) !== 0) {
      if (isIP(host) !== 0 && inCidr(host, rule)) return true;
    } else if (hostMatches(host, rule)) return true;
  }
  return false;
}

export function isLoopbackHost(host: string): boolean {
  return host === 'localhost' || (isIP(host) === 4 && inCidr(host, '127.0.0.0/8')) || (isIP(host) === 6 && inCidr(host, '::1/128'));
}
