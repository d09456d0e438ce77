import { describe, expect, it } from 'vitest';
import { missingV8Flags } from '../../src/bench/fleet/relaunch.js';

describe('bench fleet V8 flags', () => {
  it('adds the semi-space and the old space the engines need, never over the user own flags', () => {
    expect(missingV8Flags('', null, 4096)).toEqual(['--max-semi-space-size=256']);
    expect(missingV8Flags('', 6144, 4096)).toEqual(['--max-semi-space-size=256', '--max-old-space-size=6144']);
    // A limit that already fits needs no flag.
    expect(missingV8Flags('', 2048, 4096)).toEqual(['--max-semi-space-size=256']);
    expect(missingV8Flags('--max-semi-space-size=16 --max-old-space-size=3000', 6144, 3000)).toEqual([]);
    expect(missingV8Flags('--max-old-space-size=12288', 6144, 12288)).toEqual(['--max-semi-space-size=256']);
  });
});
