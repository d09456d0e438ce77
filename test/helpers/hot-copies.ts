// The index's hot-block copies read from its internals, for tests: every copy must be its block's
// list as the walk would read it.
import { expect } from 'vitest';
import type { BlockIndex } from '../../src/indexer/block-index.js';
import { HB } from '../../src/indexer/hot-blocks.js';
import { NONE } from '../../src/indexer/layout.js';
import { RECORD_LAYOUT } from '../../src/indexer/records.js';

export interface HotInternals {
  hot: {
    count: Int32Array;
    data(e: number): Int32Array;
    expiries(e: number): Float64Array;
    lo: Int32Array;
    hi: Int32Array;
    find(lo: number, hi: number): number;
  };
  table: { find(lo: number, hi: number): number; data: Int32Array };
  rec: Int32Array;
  recExp: Float64Array;
  hSpec: Uint8Array;
}

/**
 * Every copy is its block's list as the walk would read it: [record, holder, run, position] in list
 * order, and beside the rows each speculative record's expiry.
 */
export function expectCopiesAreLists(index: BlockIndex): number {
  const x = index as unknown as HotInternals;
  const { R, R_HOLDER, R_NEXT_E, R_RUN, R_POS, T, T_HEAD } = RECORD_LAYOUT;
  let copies = 0;
  for (let e = 0; e < x.hot.lo.length; e++) {
    const m = x.hot.count[e];
    if (m === 0) continue;
    copies++;
    const slot = x.table.find(x.hot.lo[e], x.hot.hi[e]);
    expect(slot).not.toBe(NONE);
    const list: number[] = [];
    const exps: number[] = [];
    for (let r = x.table.data[slot * T + T_HEAD]; r !== NONE; r = x.rec[r * R + R_NEXT_E]) {
      list.push(r, x.rec[r * R + R_HOLDER], x.rec[r * R + R_RUN], x.rec[r * R + R_POS]);
      exps.push(x.hSpec[x.rec[r * R + R_HOLDER]] === 1 ? x.recExp[r] : 0);
    }
    expect(Array.from(x.hot.data(e).subarray(0, m * HB))).toEqual(list);
    const kept = x.hot.expiries(e);
    expect(exps.map((exp, k) => (exp === 0 ? 0 : kept[k]))).toEqual(exps);
  }
  return copies;
}
