import { describe, expect, it } from 'vitest';
import {
  bootstrapRoom,
  choosePath,
  ROUTER_OWNED_FIELDS,
  routerOwnedField,
  sglangBody,
  transferParamsOf,
  vllmDecodeBody,
  vllmPrefillBody,
} from '../../src/disagg/protocol.js';
import { OpenAIError, parseCompletion } from '../../src/api/openai.js';
import { mulberry32 as seeded } from '../../src/common/prng.js';

describe('vLLM connector protocol', () => {
  it("turns a request into its prefill leg as vLLM's proxy does, leaving the client's body alone", () => {
    const body = {
      model: 'm',
      messages: [],
      stream: true,
      stream_options: { include_usage: true },
      max_tokens: 300,
      max_completion_tokens: 300,
      min_tokens: 5,
      temperature: 0.2,
    };
    const p = vllmPrefillBody(body);
    expect(p).toEqual({
      model: 'm',
      messages: [],
      stream: false,
      max_tokens: 1,
      max_completion_tokens: 1,
      temperature: 0.2,
      kv_transfer_params: {
        do_remote_decode: true,
        do_remote_prefill: false,
        remote_engine_id: null,
        remote_block_ids: null,
        remote_host: null,
        remote_port: null,
      },
    });
    expect(body.stream).toBe(true);
    expect('max_completion_tokens' in vllmPrefillBody({ model: 'm' })).toBe(false);
  });

  it("passes the prefill's kv_transfer_params to decode untouched, and nothing when there are none", () => {
    const params = {
      do_remote_prefill: true,
      remote_block_ids: [1, 2],
      remote_engine_id: 'e',
      remote_request_id: 'r',
      remote_host: 'h',
      remote_port: 5600,
      tp_size: 1,
    };
    expect(transferParamsOf({ id: 'x', kv_transfer_params: params })).toBe(params);
    for (const r of [null, 'x', [], { kv_transfer_params: null }, { kv_transfer_params: [1] }, {}])
      expect(transferParamsOf(r)).toBeNull();
    expect(vllmDecodeBody({ model: 'm', stream: true }, params)).toEqual({
      model: 'm',
      stream: true,
      kv_transfer_params: params,
    });
    expect(vllmDecodeBody({ model: 'm' }, null)).toEqual({ model: 'm' });
  });
});

describe('SGLang bootstrap protocol', () => {
  it('injects host, port and a room (a batch gets one room per item)', () => {
    expect(sglangBody({ model: 'm' }, { host: '10.0.0.1', port: 8998, room: 42 })).toEqual({
      model: 'm',
      bootstrap_host: '10.0.0.1',
      bootstrap_port: 8998,
      bootstrap_room: 42,
    });
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

describe('router-owned fields', () => {
  it('cover every field the rewrites set, so a client can send none of them', () => {
    const body = { model: 'm', prompt: 'p' };
    const added = new Set<string>();
    for (const out of [
      vllmPrefillBody(body),
      vllmDecodeBody(body, { do_remote_prefill: true }),
      sglangBody(body, { host: 'h', port: 1, room: 2 }),
      sglangBody(body, { host: 'h', port: 1, room: 2 }, 3),
    ]) {
      for (const k of Object.keys(out)) if (!(k in body) && !['stream', 'max_tokens'].includes(k)) added.add(k);
      expect(routerOwnedField(out)).not.toBeNull();
    }
    expect([...added].every((k) => (ROUTER_OWNED_FIELDS as readonly string[]).includes(k))).toBe(true);
    expect(added.size).toBe(4);
  });

  it('are refused by the parser whatever their value (null included); other fields pass', () => {
    for (const f of ROUTER_OWNED_FIELDS) {
      for (const v of [null, 0, 'x', { remote_host: 'h' }]) {
        let err: unknown = null;
        try {
          parseCompletion('completion', { model: 'm', prompt: 'p', [f]: v });
        } catch (e) {
          err = e;
        }
        expect(err).toBeInstanceOf(OpenAIError);
        expect((err as OpenAIError).body().error).toEqual({
          message: expect.stringContaining(`\`${f}\` is set by the router`),
          type: 'invalid_request_error',
          param: f,
          code: 'router_owned_field',
        });
        expect((err as OpenAIError).status).toBe(400);
      }
    }
    expect(routerOwnedField({ model: 'm', kv_transfer: 1, bootstrap: 2, room: 3 })).toBeNull();
    expect(parseCompletion('completion', { model: 'm', prompt: 'p', cache_salt: 's' }).model).toBe('m');
  });
});

describe('choosePath', () => {
  const base = {
    mode: 'auto' as const,
    isl: 1000,
    uncachedOnDecode: 1000,
    bypass: true,
    uncachedThreshold: 256,
    minPromptTokens: 0,
    prefillAvailable: true,
  };
  it('goes remote unless the decode side holds all but the threshold, the prompt is short, or the header says so', () => {
    expect(choosePath(base)).toEqual({ remote: true, reason: 'remote' });
    expect(choosePath({ ...base, uncachedOnDecode: 257 })).toEqual({ remote: true, reason: 'remote' });
    expect(choosePath({ ...base, uncachedOnDecode: 256 })).toEqual({ remote: false, reason: 'cached_tail' });
    expect(choosePath({ ...base, minPromptTokens: 1001 })).toEqual({ remote: false, reason: 'short_prompt' });
    expect(choosePath({ ...base, minPromptTokens: 1000 })).toEqual({ remote: true, reason: 'remote' });
    expect(choosePath({ ...base, uncachedOnDecode: 0, minPromptTokens: 5000, bypass: false })).toEqual({
      remote: true,
      reason: 'remote',
    });
    expect(choosePath({ ...base, mode: 'local' })).toEqual({ remote: false, reason: 'header' });
    expect(choosePath({ ...base, mode: 'remote', uncachedOnDecode: 0 })).toEqual({ remote: true, reason: 'header' });
    expect(choosePath({ ...base, prefillAvailable: false, mode: 'remote' })).toEqual({
      remote: false,
      reason: 'no_prefill_instance',
    });
    // no_prefill_instance (which prefill_fallback judges) only for a request that needs a prefill leg.
    expect(choosePath({ ...base, prefillAvailable: false })).toEqual({ remote: false, reason: 'no_prefill_instance' });
    expect(choosePath({ ...base, prefillAvailable: false, uncachedOnDecode: 256 })).toEqual({
      remote: false,
      reason: 'cached_tail',
    });
    expect(choosePath({ ...base, prefillAvailable: false, minPromptTokens: 1001 })).toEqual({
      remote: false,
      reason: 'short_prompt',
    });
    expect(choosePath({ ...base, prefillAvailable: false, mode: 'local' })).toEqual({
      remote: false,
      reason: 'header',
    });
    // Without tokens nothing can be judged: the prefill pool does the work it exists for.
    expect(choosePath({ ...base, isl: 0, uncachedOnDecode: 0 })).toEqual({ remote: true, reason: 'untokenized' });
  });
});
