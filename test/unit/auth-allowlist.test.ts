// The /register allowlist and the loopback check, address by address. The /register route itself
// is exercised over HTTP in test/integration/auth.test.ts.
import { describe, expect, it } from 'vitest';
import { DEFAULT_REGISTER_ALLOWLIST, endpointAllowed, endpointHost, isLoopbackHost } from '../../src/auth/allowlist.js';

const allowed = (host: string, allowlist: readonly string[] = DEFAULT_REGISTER_ALLOWLIST) =>
  endpointAllowed(`tcp://${host.includes(':') ? `[${host}]` : host}:5557`, allowlist);

describe('isLoopbackHost', () => {
  it('knows IPv4, IPv6 and IPv4-mapped loopback', () => {
    for (const host of [
      'localhost',
      '127.0.0.1',
      '127.255.0.9',
      '::1',
      '0:0:0:0:0:0:0:1',
      '::ffff:127.0.0.1',
      '::ffff:7f00:1',
    ])
      expect(isLoopbackHost(host), host).toBe(true);
  });

  it('rejects wildcard, private, mapped non-loopback and non-addresses', () => {
    for (const host of [
      '0.0.0.0',
      '::',
      '10.0.0.1',
      '128.0.0.1',
      '::2',
      '::ffff:10.0.0.1',
      '::127.0.0.1',
      'example.com',
      '127.0.0',
      '',
      'localhost.evil.com',
    ])
      expect(isLoopbackHost(host), host).toBe(false);
  });
});

describe('endpointAllowed', () => {
  it('allows loopback publishers by default, IPv4-mapped ones included', () => {
    for (const host of ['127.0.0.1', '::1', 'localhost', '::ffff:127.0.0.1']) expect(allowed(host), host).toBe(true);
    for (const host of ['192.0.2.10', '::ffff:192.0.2.10', '2001:db8::1', 'example.com'])
      expect(allowed(host), host).toBe(false);
  });

  it('matches an IPv4-mapped IPv6 address against an IPv4 CIDR', () => {
    expect(allowed('::ffff:10.0.0.1', ['10.0.0.0/8'])).toBe(true);
    expect(allowed('::ffff:a00:1', ['10.0.0.0/8'])).toBe(true);
    expect(allowed('::ffff:11.0.0.1', ['10.0.0.0/8'])).toBe(false);
  });

  it('matches IPv4 CIDRs and single addresses at their prefix boundaries', () => {
    const list = ['10.1.0.0/16', '192.0.2.7'];
    expect(allowed('10.1.255.255', list)).toBe(true);
    expect(allowed('10.2.0.0', list)).toBe(false);
    expect(allowed('192.0.2.7', list)).toBe(true);
    expect(allowed('192.0.2.8', list)).toBe(false);
    expect(allowed('203.0.113.5', ['0.0.0.0/0'])).toBe(true);
  });

  it('matches IPv6 CIDRs, however the address is written', () => {
    const list = ['fd00:1:2::/48'];
    expect(allowed('fd00:1:2:ffff::1', list)).toBe(true);
    expect(allowed('fd00:0001:0002:0000:0000:0000:0000:0009', list)).toBe(true);
    expect(allowed('fd00:1:3::1', list)).toBe(false);
    expect(allowed('10.0.0.1', list)).toBe(false);
    expect(allowed('2001:db8::1', ['::/0'])).toBe(true);
    // NAT64: the last 32 bits written as a dotted quad
    expect(allowed('64:ff9b::192.0.2.1', ['64:ff9b::c000:200/120'])).toBe(true);
    expect(allowed('64:ff9b::192.0.3.1', ['64:ff9b::c000:200/120'])).toBe(false);
  });

  it('matches host names exactly or by *. suffix, ignoring case, and never by address', () => {
    const list = ['*.svc.cluster.local', 'engine-0'];
    expect(allowed('vllm-0.ns.svc.cluster.local', list)).toBe(true);
    expect(allowed('VLLM-0.SVC.Cluster.Local', list)).toBe(true);
    expect(allowed('svc.cluster.local', list)).toBe(false);
    expect(allowed('evil-svc.cluster.local', list)).toBe(false);
    expect(allowed('Engine-0', list)).toBe(true);
    expect(allowed('engine-01', list)).toBe(false);
    expect(allowed('127.0.0.1', ['localhost'])).toBe(false);
    expect(allowed('localhost', ['127.0.0.0/8'])).toBe(false);
  });

  it('allows ipc:// only where a rule names the path, never inproc://, and nothing that is not tcp://host:port', () => {
    expect(endpointAllowed('ipc:///tmp/kv.sock', DEFAULT_REGISTER_ALLOWLIST)).toBe(false);
    expect(endpointAllowed('ipc:///tmp/kv.sock', ['ipc:///tmp/kv.sock'])).toBe(true);
    expect(endpointAllowed('ipc:///run/vllm/e0.sock', ['ipc:///run/vllm/*'])).toBe(true);
    expect(endpointAllowed('ipc:///etc/x.sock', ['ipc:///run/vllm/*'])).toBe(false);
    expect(endpointAllowed('inproc://kv', ['ipc://*', 'inproc://*', '127.0.0.0/8'])).toBe(false);
    for (const e of [
      'tcp://127.0.0.1',
      'tcp://127.0.0.1:',
      'tcp://127.0.0.1:port',
      'tcp://::1:5557',
      'udp://127.0.0.1:5557',
      'http://127.0.0.1:5557',
      '127.0.0.1:5557',
      '',
    ])
      expect(endpointAllowed(e, DEFAULT_REGISTER_ALLOWLIST), e).toBe(false);
  });

  it('lets a malformed CIDR rule allow nothing rather than more', () => {
    for (const rule of ['10.0.0.0/33', '10.0.0.0/', '10.0.0.0/8x', '10.0.0.0/-1', '::/129']) {
      expect(allowed('10.0.0.1', [rule]), rule).toBe(false);
      expect(allowed('::1', [rule]), rule).toBe(false);
    }
    expect(allowed('300.1.1.1', ['0.0.0.0/0'])).toBe(false);
  });
});

describe('endpointHost', () => {
  it('strips IPv6 brackets and keeps host names', () => {
    expect(endpointHost('tcp://[::ffff:127.0.0.1]:5557')).toBe('::ffff:127.0.0.1');
    expect(endpointHost('tcp://engine-0.local:5557')).toBe('engine-0.local');
    expect(endpointHost('ipc:///tmp/kv.sock')).toBeNull();
  });
});
