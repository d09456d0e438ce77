import { describe, expect, it } from 'vitest';
import { bootstrapRoom, choosePath, sglangBody, transferParamsOf, vllmDecodeBody, vllmPrefillBody } from '../../src/disagg/protocol.js';
import { mulberry32 as seeded } from '../../src/common/prng.js';

describe('vLLM connector protocol', () => {
  it('turns a request into its prefill leg as vLLM\'s proxy does, leaving the client\'s body alone', () => {
    const body = { model: 'm', messages: [], stream: true, stream_options: { include_usage: true }, max_tokens: 300, max_completion_tokens: 300, min_tokens: 5, temperature: 0.2 };
    const p = vllmPrefillBody(body);
    expect(p).toEqual({
      model: 'm',
      messages: [],
      stream: false,
      max_tokens: 1,
      max_completion_tokens: 1,
      temperature: 0.2,
      kv_transfer_params: { do_remote_decode: true, do_remote_prefill: false, remote_engine_id: null, remote_block_ids: null, remote_host: null, remote_port: null },
    });
    expect(body.stream).toBe(true);
    expect('max_completion_tokens' in vllmPrefillBody({ model: 'm' })).toBe(false);
  });

  it('passes the prefill\'s kv_transfer_params to decode untouched, and nothing when there are none', () => {
    const params = { do_remote_prefill: true, remote_block_ids: [1, 2], remote_engine_id: 'e', remote_request_id: 'r', remote_host: 'h', remote_port: 5600, tp_size: 1 };
    expect(transferParamsOf({ id: 'x', kv_transfer_params: params })).toBe(params);
    for (const r of [null, 'x', [], { kv_transfer_params: null }, { kv_transfer_params: [1] }, {}]) expect(transferParamsOf(r)).toBeNull();
    expect(vllmDecodeBody({ model: 'm', stream: true }, params)).toEqual({ model: 'm', stream: true, kv_transfer_params: params });
    expect(vllmDecodeBody({ model: 'm' }, null)).toEqual({ model: 'm' });
  });
});

describe('SGLang bootstrap protocol', () => {
  it('injects host, port and a room (a batch gets one room per item)', () => {
    expect(sglangBody({ model: 'm' }, { host: '10.0.0.1', port: 8998, room: 42 })).toEqual({ model: 'm', bootstrap_host: '10.0.0.1', bootstrap_port: 8998, bootstrap_room: 42 });
    const b = sglangBody({ model: 'm' }, { host: 'h', port: 1, room: 7 }, 3, seeded(1));
    expect(b.bootstrap_host).toEqual(['h', 'h', 'h']);
    expect(b.bootstrap_port).toEqual([1, 1, 1]);
    const rooms = b.bootstrap_room as number[];
    expect(rooms[0]).toBe(7);
    expect(new Set(rooms).size).toBe(3);
  });

  it('rooms are exact JSON integers below 2^53, spread over the range', () => {
    const r = seeded(3);
    const rooms = Array.from({ length: 1000 }, () => bootstrapRoom(r));
    for (const x of rooms) {
      expect(Number.isSafeInteger(x) && x >= 0).toBe(true);
      expect(JSON.parse(JSON.stringify(x))).toBe(x);
    }
    expect(new Set(rooms).size).toBe(1000);
    expect(Math.max(...rooms)).toBeGreaterThan(2 ** 52);
    expect(bootstrapRoom(() => 0.9999999999)).toBeLessThan(2 ** 53);
  });
});

describe('choosePath', () => {
  const base = { mode: 'auto' as const, isl: 1000, uncachedOnDecode: 1000, bypass: true, uncachedThreshold: 256, minPromptTokens: 0, prefillAvailable: true };
  it('goes remote unless the decode side holds all but the threshold, the prompt is short, or the header says so', () => {
    expect(choosePath(base)).toEqual({ remote: true, reason: 'remote' });
    expect(choosePath({ ...base, uncachedOnDecode: 257 })).toEqual({ remote: true, reason: 'remote' });
    expect(choosePath({ ...base, uncachedOnDecode: 256 })).toEqual({ remote: false, reason: 'cached_tail' });
    expect(choosePath({ ...base, minPromptTokens: 1001 })).toEqual({ remote: false, reason: 'short_prompt' });
    expect(choosePath({ ...base, minPromptTokens: 1000 })).toEqual({ remote: true, reason: 'remote' });
    expect(choosePath({ ...base, uncachedOnDecode: 0, minPromptTokens: 5000, bypass: false })).toEqual({ remote: true, reason: 'remote' });
    expect(choosePath({ ...base, mode: 'local' })).toEqual({ remote: false, reason: 'header' });
    expect(choosePath({ ...base, mode: 'remote', uncachedOnDecode: 0 })).toEqual({ remote: true, reason: 'header' });
    expect(choosePath({ ...base, prefillAvailable: false, mode: 'remote' })).toEqual({ remote: false, reason: 'no_prefill_instance' });
    // no_prefill_instance (which prefill_fallback judges) only for a request that needs a prefill leg.
    expect(choosePath({ ...base, prefillAvailable: false })).toEqual({ remote: false, reason: 'no_prefill_instance' });
    expect(choosePath({ ...base, prefillAvailable: false, uncachedOnDecode: 256 })).toEqual({ remote: false, reason: 'cached_tail' });
    expect(choosePath({ ...base, prefillAvailable: false, minPromptTokens: 1001 })).toEqual({ remote: false, reason: 'short_prompt' });
    expect(choosePath({ ...base, prefillAvailable: false, mode: 'local' })).toEqual({ remote: false, reason: 'header' });
    // Without tokens nothing can be judged: the prefill pool does the work it exists for.
    expect(choosePath({ ...base, isl: 0, uncachedOnDecode: 0 })).toEqual({ remote: true, reason: 'untokenized' });
  });
});
