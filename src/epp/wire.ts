// The ext_proc wire types as @grpc/proto-loader decodes them (keepCase, oneofs, enums as names,
// bytes as Buffer), the loader, and builders for every response the picker sends. No logic here.
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import * as protoLoader from '@grpc/proto-loader';

/**
 * The .proto files beside this module: src/epp/proto, copied to dist/epp/proto by the build (what
 * the image and the npm package carry); a checkout whose dist/ predates them reads src/'s.
 */
export const PROTO_DIR =
  [new URL('./proto/', import.meta.url), new URL('../../src/epp/proto/', import.meta.url)]
    .map((u) => fileURLToPath(u))
    .find((d) => existsSync(d)) ?? fileURLToPath(new URL('./proto/', import.meta.url));
export const EXT_PROC_PROTO = 'envoy/service/ext_proc/v3/external_processor.proto';
export const EXT_PROC_SERVICE = 'envoy.service.ext_proc.v3.ExternalProcessor';

/** Options shared by the server and the tests' client: field names as in Envoy's docs. */
export const LOADER_OPTIONS: protoLoader.Options = {
  keepCase: true,
  longs: String,
  enums: String,
  defaults: false,
  oneofs: true,
  includeDirs: [PROTO_DIR],
};

export function loadExtProc(): protoLoader.PackageDefinition {
  return protoLoader.loadSync(EXT_PROC_PROTO, LOADER_OPTIONS);
}

// ---- google.protobuf.Struct ----
// protobufjs bundles the well-known types with camelCase field names: keepCase does not apply here.

export interface ProtoValue {
  nullValue?: string | number;
  numberValue?: number;
  stringValue?: string;
  boolValue?: boolean;
  structValue?: ProtoStruct;
  listValue?: { values?: ProtoValue[] };
}

export interface ProtoStruct {
  fields?: Record<string, ProtoValue>;
}

/** A Struct of strings and nested string maps (all the picker ever writes). */
export function toStruct(o: Record<string, string | Record<string, string>>): ProtoStruct {
  const fields: Record<string, ProtoValue> = {};
  for (const [k, v] of Object.entries(o))
    fields[k] = typeof v === 'string' ? { stringValue: v } : { structValue: toStruct(v) };
  return { fields };
}

/** A value's strings: a string, or a list's string members (anything else: none). */
export function stringsOf(v: ProtoValue | undefined): string[] | null {
  if (!v) return null;
  if (typeof v.stringValue === 'string') return [v.stringValue];
  if (v.listValue)
    return (v.listValue.values ?? []).flatMap((x) => (typeof x.stringValue === 'string' ? [x.stringValue] : []));
  return null;
}

// ---- requests (Envoy -> picker) ----

export interface HeaderValue {
  key: string;
  value?: string;
  raw_value?: Buffer;
}

export interface HeaderMap {
  headers?: HeaderValue[];
}

export interface HttpHeaders {
  headers?: HeaderMap;
  end_of_stream?: boolean;
}

export interface HttpBody {
  body?: Buffer;
  end_of_stream?: boolean;
}

export interface HttpTrailers {
  trailers?: HeaderMap;
}

export type BodySendMode = 'NONE' | 'STREAMED' | 'BUFFERED' | 'BUFFERED_PARTIAL' | 'FULL_DUPLEX_STREAMED' | 'GRPC';

export interface ProtocolConfiguration {
  /** A number when Envoy names a mode newer than these protos. */
  request_body_mode?: BodySendMode | number;
  response_body_mode?: BodySendMode | number;
  send_body_without_waiting_for_header_response?: boolean;
}

export interface ProcessingRequest {
  request?:
    | 'request_headers'
    | 'response_headers'
    | 'request_body'
    | 'response_body'
    | 'request_trailers'
    | 'response_trailers';
  request_headers?: HttpHeaders;
  response_headers?: HttpHeaders;
  request_body?: HttpBody;
  response_body?: HttpBody;
  request_trailers?: HttpTrailers;
  response_trailers?: HttpTrailers;
  metadata_context?: { filter_metadata?: Record<string, ProtoStruct> };
  observability_mode?: boolean;
  protocol_config?: ProtocolConfiguration;
}

/** Envoy sends header values in raw_value (bytes); older senders used value. */
export function headerText(h: HeaderValue): string {
  return h.raw_value && h.raw_value.length > 0 ? h.raw_value.toString('utf8') : (h.value ?? '');
}

/** Lower-cased names to values (a repeated header's values joined with ", ", as HTTP allows). */
export function headerRecord(m: HeaderMap | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  for (const h of m?.headers ?? []) {
    const k = h.key.toLowerCase();
    const v = headerText(h);
    out[k] = k in out ? `${out[k]}, ${v}` : v;
  }
  return out;
}

// ---- responses (picker -> Envoy) ----

export interface HeaderMutation {
  set_headers?: Array<{ header: { key: string; raw_value: Buffer }; append_action: 'OVERWRITE_IF_EXISTS_OR_ADD' }>;
  remove_headers?: string[];
}

export interface CommonResponse {
  status?: 'CONTINUE' | 'CONTINUE_AND_REPLACE';
  header_mutation?: HeaderMutation;
  body_mutation?: { body: Buffer } | { streamed_response: { body: Buffer; end_of_stream: boolean } };
  clear_route_cache?: boolean;
}

export interface ImmediateResponse {
  status: { code: number };
  headers?: HeaderMutation;
  body?: Buffer;
  details?: string;
}

export type ProcessingResponse = (
  | { request_headers: { response: CommonResponse } }
  | { response_headers: { response: CommonResponse } }
  | { request_body: { response: CommonResponse } }
  | { response_body: { response: CommonResponse } }
  | { request_trailers: { header_mutation?: HeaderMutation } }
  | { response_trailers: { header_mutation?: HeaderMutation } }
  | { immediate_response: ImmediateResponse }
) & { dynamic_metadata?: ProtoStruct };

/**
 * Set (overwrite) headers: a client's own `x-gateway-destination-endpoint` must never survive next
 * to the pick, and ext_proc's append default has varied between Envoy versions.
 */
export function setHeaders(h: Record<string, string>): HeaderMutation {
  return {
    set_headers: Object.entries(h).map(([key, v]) => ({
      header: { key, raw_value: Buffer.from(v) },
      append_action: 'OVERWRITE_IF_EXISTS_OR_ADD',
    })),
  };
}

/** Envoy proxies cap one streamed chunk at 64 KiB; GIE stays under it with margin (62000). */
export const BODY_CHUNK_BYTES = 62_000;

/** FULL_DUPLEX_STREAMED: a body sent back as streamed chunks, the last one flagged (an empty body is one empty chunk). */
export function streamedBody(
  phase: 'request_body' | 'response_body',
  body: Buffer,
  endOfStream: boolean,
): ProcessingResponse[] {
  const out: ProcessingResponse[] = [];
  let at = 0;
  do {
    const chunk = body.subarray(at, at + BODY_CHUNK_BYTES);
    at += chunk.length;
    const response: CommonResponse = {
      body_mutation: { streamed_response: { body: chunk, end_of_stream: endOfStream && at >= body.length } },
    };
    out.push(phase === 'request_body' ? { request_body: { response } } : { response_body: { response } });
  } while (at < body.length);
  return out;
}

export function immediate(
  status: number,
  body: object,
  headers: Record<string, string>,
  details: string,
): ProcessingResponse {
  return {
    immediate_response: {
      status: { code: status },
      headers: setHeaders({ 'content-type': 'application/json', ...headers }),
      body: Buffer.from(JSON.stringify(body)),
      details,
    },
  };
}
