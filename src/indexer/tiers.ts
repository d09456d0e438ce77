// Canonical cache media. Engines name them many ways; everything maps onto four tiers,
// ordered from fastest to slowest. The cumulative walk treats a block as reachable at level L
// when it sits on any tier at or above L.
export type Medium = 'GPU' | 'CPU' | 'DISK' | 'EXTERNAL';
export const MEDIA: readonly Medium[] = ['GPU', 'CPU', 'DISK', 'EXTERNAL'];

export const TIER_BIT: Readonly<Record<Medium, number>> = { GPU: 1, CPU: 2, DISK: 4, EXTERNAL: 8 };

const ALIASES: Record<string, Medium> = {
  GPU: 'GPU',
  DEVICE: 'GPU',
  HBM: 'GPU',
  NPU: 'GPU',
  G1: 'GPU',
  CPU: 'CPU',
  CPU_PINNED: 'CPU',
  CPU_TIER1: 'CPU',
  HOST: 'CPU',
  DRAM: 'CPU',
  G2: 'CPU',
  DISK: 'DISK',
  SSD: 'DISK',
  NVME: 'DISK',
  CPU_TIER2: 'DISK',
  G3: 'DISK',
  FS: 'DISK', // vLLM offloading to a file system
  OBJ: 'EXTERNAL', // vLLM offloading to an object store
  EXTERNAL: 'EXTERNAL',
  STORAGE: 'EXTERNAL',
  SHARED: 'EXTERNAL',
  REMOTE: 'EXTERNAL',
  NETWORK: 'EXTERNAL',
};

/** Map an engine's medium name to a canonical tier; null/empty means the device. Unknown -> null. */
export function canonicalMedium(name: string | null | undefined): Medium | null {
  if (name === null || name === undefined || name === '') return 'GPU';
  return ALIASES[name.toUpperCase()] ?? null;
}
