// Which ZMQ endpoints /register may point listeners at: IPv4/IPv6 CIDRs and host patterns
// (`*.example.com`). Loopback only by default, so a caller cannot make the router connect anywhere.
// Address matching is node:net's BlockList: it knows that ::ffff:10.0.0.1 is 10.0.0.1.
import { BlockList, isIP } from 'node:net';

export const DEFAULT_REGISTER_ALLOWLIST: readonly string[] = ['127.0.0.0/8', '::1/128', 'localhost'];

function familyOf(ip: string): 'ipv4' | 'ipv6' | null {
  const family = isIP(ip);
  return family === 4 ? 'ipv4' : family === 6 ? 'ipv6' : null;
}

/**
 * Adds an address rule (`10.0.0.0/8`, `::1`, `fd00::/8`) to `list`. Returns false when `rule` is not
 * an address, so it is a host pattern. An address with a prefix out of range adds nothing: a typo
 * in the allowlist must not widen it.
 */
function addAddressRule(list: BlockList, rule: string): boolean {
  const slash = rule.indexOf('/');
  const base = slash < 0 ? rule : rule.slice(0, slash);
  const family = familyOf(base);
  if (family === null) return false;
  const max = family === 'ipv4' ? 32 : 128;
  const prefix = slash < 0 ? max : /^\d{1,3}$/.test(rule.slice(slash + 1)) ? Number(rule.slice(slash + 1)) : -1;
  if (prefix >= 0 && prefix <= max) list.addSubnet(base, prefix, family);
  return true;
}

function inList(list: BlockList, host: string): boolean {
  const family = familyOf(host);
  return family !== null && list.check(host, family);
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

/**
 * Whether /register may point a listener at `endpoint`. tcp:// hosts are matched against the CIDRs
 * and host patterns; an ipc:// path only against rules that are themselves ipc:// paths (a trailing
 * `*` matches any rest), so unix sockets are off unless the operator names them; inproc:// never
 * (it would wait on a socket inside this process forever).
 */
export function endpointAllowed(endpoint: string, allowlist: readonly string[]): boolean {
  if (endpoint.startsWith('inproc://')) return false;
  if (endpoint.startsWith('ipc://')) {
    return allowlist.some(
      (rule) =>
        rule.startsWith('ipc://') && (rule.endsWith('*') ? endpoint.startsWith(rule.slice(0, -1)) : endpoint === rule),
    );
  }
  const host = endpointHost(endpoint);
  if (host === null) return false;
  const addresses = new BlockList();
  const patterns = allowlist.filter((rule) => !addAddressRule(addresses, rule));
  return inList(addresses, host) || patterns.some((p) => hostMatches(host, p));
}

const LOOPBACK = new BlockList();
LOOPBACK.addSubnet('127.0.0.0', 8, 'ipv4');
LOOPBACK.addAddress('::1', 'ipv6');

export function isLoopbackHost(host: string): boolean {
  return host === 'localhost' || inList(LOOPBACK, host);
}
