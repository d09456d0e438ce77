// One namespace of the tiered index: seq hash -> holders (backend, dp rank, medium), with a
// cumulative per-(instance, dp rank) tier walk for queries. Pure data structure: no timers, no I/O;
// callers pass `now` (ms) for speculative entries.
//
// Layout, chosen so a query touches about one cache line per block plus its records:
//   table   U64Table rows [hashLo, hashHi, used, headRecord]: seq hash -> first record
//   records Int32Array rows of 8: [hashLo, hashHi, holder, nextInEntry, prevInHolder, nextInHolder,
//           run, position in run] + Int32Array engine hash [lo, hi] + Float64Array expiry
//           (speculative records only) + Float64Array touch (the holder's allocation clock when the
//           block was last stored or routed to) + Int32Array claims (speculative records only: the
//           bookings' inserts that claim it)
//   holders (backend, dp rank, medium, owner) with a doubly linked list of their records, so a
//           `cleared` event or an unregister purges in O(records of that holder)
//   groups  (backend, dp rank): scope of engine-native hashes (dual key): engine hash -> the record
//           that carries it (engine-map.ts; the record holds the seq hash)
//   runs    chains a holder stored, block after block (one store, or stores that continue their
//           parent): each record knows its run and position in it, each run its length, so a record
//           tells how far its holder's chain goes past it. The query walk uses that as a prediction,
//
// The class is layered by concern, one file each, on one object (one hidden class: the walk reads
// the record and holder arrays as fields of `this`, with no indirection): holders.ts -> records.ts
// (record rows, free list, runs, engine map, LRU) -> writes.ts -> walk.ts (the query) -> this file
// (dump and stats). See README.md (module map and the invariants each file owns).
import { join, NONE } from './layout.js';
import { RECORD_ROW_BYTES } from './records.js';
import { IndexWalk } from './walk.js';

export type { HolderInfo } from './holders.js';
export type { CandidateOverlap, CandidateOverlaps, OverlapResult } from './walk.js';
export type { SpeculativeInsert } from './writes.js';

// Row offsets read here (a module-local copy: see records.ts RECORD_LAYOUT).
const R = 8;
const R_HI = 1;
const R_LO = 0;
const R_NEXT_H = 5;
/** This module's copy of the row offsets (checked against RECORD_LAYOUT). */
export const DUMP_LAYOUT = { R, R_HI, R_LO, R_NEXT_H };

export interface DumpedBlock {
  hash: bigint;
  /** Engine-native hash when it differs from the router hash. */
  engineHash: bigint | null;
  expiresAt: number;
}

export interface IndexStats {
  blocks: number;
  records: number;
  holders: number;
  bytes: number;
}

export class BlockIndex extends IndexWalk {
  constructor(initialBlocks = 1024, onHoldersPurged?: () => void, reserveRecords = 0, reserveEngineHashes = 0) {
    super(initialBlocks, onHoldersPurged, reserveRecords, reserveEngineHashes);
  }

  // ---------------------------------------------------------------- dump and stats

  /** Blocks held by a holder, in insertion order (for /dump and peer recovery). */
  holderBlocks(holder: number): DumpedBlock[] {
    const h = this.holders[holder];
    const out: DumpedBlock[] = [];
    if (!h) return out;
    const rec = this.rec;
    const spec = h.speculative;
    for (let r = h.head; r !== NONE; r = rec[r * R + R_NEXT_H]) {
      const o = r * R;
      const eng = this.recEng;
      const same = spec || (eng[2 * r] === rec[o + R_LO] && eng[2 * r + 1] === rec[o + R_HI]);
      out.push({
        hash: join(rec[o + R_LO], rec[o + R_HI]),
        engineHash: same ? null : join(eng[2 * r], eng[2 * r + 1]),
        expiresAt: spec ? this.recExp[r] : 0,
      });
    }
    return out;
  }

  stats(): IndexStats {
    const bytes =
      this.table.byteLength +
      this.recordRows() * RECORD_ROW_BYTES + // rec, recTouch (recClaims shares it), recEng (recExp shares it)
      this.runLen.byteLength +
      this.runRefs.byteLength +
      this.runKey.byteLength +
      this.runTouchEnd.byteLength +
      this.runTouchEpoch.byteLength +
      this.runTail.byteLength +
      this.hot.byteLength +
      this.crowd.byteLength +
      this.groups.reduce((s, g) => s + (g.engineMap ? g.engineMap.byteLength : 0), 0);
    return {
      blocks: this.table.size,
      records: this.liveRecords,
      holders: this.holderIds().length,
      bytes,
    };
  }
}
