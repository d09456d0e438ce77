// Prompt tokenization errors become 400s (bad messages, template errors, no tokenizer).
import { ChatTemplateError } from '../../tokenizer/index.js';
import { NoTokenizerError } from '../text/codec.js';
import { badRequest } from './errors.js';

export async function encodeOrReject(encode: () => Promise<Uint32Array>): Promise<Uint32Array> {
  try {
    return await encode();
  } catch (err) {
    if (err instanceof ChatTemplateError || err instanceof NoTokenizerError) throw badRequest(err.message);
    throw err;
  }
}
