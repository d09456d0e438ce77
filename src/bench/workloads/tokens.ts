// Seeded generators shared by the workloads: the same key always gives the same tokens or words.
import { MULBERRY32_STEP, mulberry32, mulberry32Out } from '../../common/prng.js';

/** 32-bit integer mix (murmur3 finalizer over a running combination): a stable key for (a, b, ...). */
export function mix(...parts: number[]): number {
  let h = 0x9e3779b9;
  for (const p of parts) {
    h ^= Math.imul((p | 0) ^ Math.floor(p / 2 ** 32), 0x85ebca6b);
    h = Math.imul(h ^ (h >>> 13), 0xc2b2ae35);
    h ^= h >>> 16;
  }
  return h >>> 0;
}

/** mulberry32 (src/common/prng.ts). */
export const rng = mulberry32;

// Ordinary ids of a 150k-entry vocabulary, far from the special tokens at either end.
const TOKEN_LO = 1000;
const TOKEN_SPAN = 99_000;

/** `len` pseudo-random token ids determined by (seed, key). */
export function tokenBlock(seed: number, key: number, len: number): Uint32Array {
  const out = new Uint32Array(len);
  fillTokens(out, 0, seed, key, len);
  return out;
}

/** The first `len` ids of tokenBlock(seed, key, ...), written into `out` at `at` (no array of their own). */
export function fillTokens(out: Uint32Array, at: number, seed: number, key: number, len: number): void {
  // rng(mix(seed, key))'s draws, its state in a local (a fleet run draws every prompt's tokens).
  let s = mix(seed, key) >>> 0;
  for (let i = 0; i < len; i++) {
    s = (s + MULBERRY32_STEP) >>> 0;
    out[at + i] = TOKEN_LO + Math.floor(mulberry32Out(s) * TOKEN_SPAN);
  }
}

/** Exponential inter-arrival gaps at `ratePerS`: Poisson arrival offsets in ms. */
export function poissonArrivals(n: number, ratePerS: number, seed: number): number[] {
  const r = rng(mix(seed, 0x5eed));
  const out: number[] = [];
  let t = 0;
  for (let i = 0; i < n; i++) {
    out.push(t);
    t += (-Math.log(1 - r()) / ratePerS) * 1000;
  }
  return out;
}

/** Fisher-Yates with a seeded generator. */
export function shuffle<T>(xs: T[], seed: number): T[] {
  const r = rng(mix(seed, 0x5f1e));
  for (let i = xs.length - 1; i > 0; i--) {
    const j = Math.floor(r() * (i + 1));
    [xs[i], xs[j]] = [xs[j], xs[i]];
  }
  return xs;
}

// Common English words: each is one token (with its leading space) in the usual BPE vocabularies,
// so a text of n words is close to n tokens.
const WORDS = (
  'the of and to in is was for on with as by at from that this it be are or an have not which one had but ' +
  'all were when we there can more if will no out so up said what about into than them some could time ' +
  'these two may then do first any my now such like our over man me even most made after also did many ' +
  'before must through back years where much your way well down should because each just those people how ' +
  'too little state good very make world still own see men work long get here between both life being under ' +
  'never day same another know while last might us great old year off come since against go came right used ' +
  'take three states himself few house use during without again place around however home small found thought ' +
  'went say part once general high upon school every does got united left number course war until always away ' +
  'something fact though water less public put think almost hand enough far took head yet government system ' +
  'better set told nothing night end why called didn eyes find going look asked later knew point next program'
).split(' ');

/** `n` seeded words joined by spaces (about n tokens). */
export function words(seed: number, key: number, n: number): string {
  const r = rng(mix(seed, key));
  const out: string[] = [];
  for (let i = 0; i < n; i++) out.push(WORDS[Math.floor(r() * WORDS.length)]);
  return out.join(' ');
}
