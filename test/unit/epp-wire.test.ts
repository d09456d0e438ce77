// The picker's pure parts: body chunking for FULL_DUPLEX_STREAMED, header mutations, Struct values,
// and how instance URLs become the ip:port a gateway names.
import { describe, expect, it } from 'vitest';
import { EndpointAddresses } from '../../src/epp/endpoints.js';
import { BODY_CHUNK_BYTES, headerRecord, setHeaders, streamedBody, stringsOf, toStruct } from '../../src/epp/wire.js';

describe('wire', () => {
  it('hands a body back in chunks under the 64 KiB frame, the last one flagged', () => {
    const body = Buffer.alloc(2 * BODY_CHUNK_BYTES + 7, 1);
    const out = streamedBody('request_body', body, true);
    const sr = out.map(
      (m) =>
        ('request_body' in m ? m.request_body.response.body_mutation : null) as {
          streamed_response: { body: Buffer; end_of_stream: boolean };
        },
    );
    expect(sr.map((x) => x.streamed_response.body.length)).toEqual([BODY_CHUNK_BYTES, BODY_CHUNK_BYTES, 7]);
    expect(sr.map((x) => x.streamed_response.end_of_stream)).toEqual([false, false, true]);
    expect(Buffer.concat(sr.map((x) => x.streamed_response.body)).equals(body)).toBe(true);
    // Trailers follow: no chunk ends the stream. An empty body is one empty chunk.
    expect(
      streamedBody('request_body', body, false).some(
        (m) =>
          'request_body' in m &&
          (m.request_body.response.body_mutation as { streamed_response: { end_of_stream: boolean } }).streamed_response
            .end_of_stream,
      ),
    ).toBe(false);
    const empty = streamedBody('response_body', Buffer.alloc(0), true);
    expect(empty).toHaveLength(1);
    expect(empty[0]).toEqual({
      response_body: {
        response: { body_mutation: { streamed_response: { body: Buffer.alloc(0), end_of_stream: true } } },
      },
    });
  });

  it('overwrites headers it sets, reads raw values, joins repeated headers', () => {
    expect(setHeaders({ 'x-gateway-destination-endpoint': '10.0.0.1:8000' }).set_headers).toEqual([
      {
        header: { key: 'x-gateway-destination-endpoint', raw_value: Buffer.from('10.0.0.1:8000') },
        append_action: 'OVERWRITE_IF_EXISTS_OR_ADD',
      },
    ]);
    expect(
      headerRecord({
        headers: [
          { key: ':Path', raw_value: Buffer.from('/v1/completions') },
          { key: 'a', value: 'old-style' },
          { key: 'a', raw_value: Buffer.from('2') },
        ],
      }),
    ).toEqual({ ':path': '/v1/completions', a: 'old-style, 2' });
  });

  it('writes and reads Struct values', () => {
    expect(toStruct({ 'envoy.lb': { 'x-gateway-destination-endpoint': '10.0.0.1:8000' } })).toEqual({
      fields: {
        'envoy.lb': { structValue: { fields: { 'x-gateway-destination-endpoint': { stringValue: '10.0.0.1:8000' } } } },
      },
    });
    expect(
      stringsOf({ listValue: { values: [{ stringValue: 'a:1' }, { numberValue: 3 }, { stringValue: 'b:2' }] } }),
    ).toEqual(['a:1', 'b:2']);
    expect(stringsOf({ stringValue: 'a:1,b:2' })).toEqual(['a:1,b:2']);
    expect(stringsOf({ boolValue: true })).toBeNull();
    expect(stringsOf(undefined)).toBeNull();
  });
});

describe('EndpointAddresses', () => {
  it('takes IP literals as they are, with default ports and bracketed IPv6; unix sockets have none', () => {
    const a = new EndpointAddresses(() => 0);
    expect(a.addressOf('http://10.1.2.3:8000/v1')).toBe('10.1.2.3:8000');
    expect(a.addressOf('http://10.1.2.3')).toBe('10.1.2.3:80');
    expect(a.addressOf('https://10.1.2.3')).toBe('10.1.2.3:443');
    expect(a.addressOf('http://[fd00::1]:8000')).toBe('[fd00::1]:8000');
    expect(a.addressOf('unix:///run/engine.sock')).toBeNull();
  });

  it('resolves host names, refreshes stale answers behind, keeps the last answer through a failed lookup', async () => {
    let t = 0;
    let answer: string | Error = '10.0.0.5';
    let lookups = 0;
    const a = new EndpointAddresses(
      () => t,
      5000,
      async () => {
        lookups++;
        if (answer instanceof Error) throw answer;
        return answer;
      },
    );
    const url = 'http://vllm-0.vllm.llm.svc:8000';
    expect(a.addressOf(url)).toBeNull();
    await a.refresh([url, url]);
    expect(lookups).toBe(1);
    expect(a.addressOf(url)).toBe('10.0.0.5:8000');
    await a.refresh([url]);
    expect(lookups).toBe(1); // fresh: no lookup
    t = 6000;
    answer = '10.0.0.9'; // the pod restarted elsewhere
    await a.refresh([url]); // stale: refreshed behind, the old answer serves meanwhile
    await new Promise((r) => setImmediate(r));
    expect(a.addressOf(url)).toBe('10.0.0.9:8000');
    t = 12_000;
    answer = new Error('SERVFAIL');
    await a.refresh([url]);
    await new Promise((r) => setImmediate(r));
    expect(lookups).toBe(3);
    expect(a.addressOf(url)).toBe('10.0.0.9:8000');
  });
});
