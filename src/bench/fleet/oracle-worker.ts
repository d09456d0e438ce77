// The oracle of a `bench fleet` setup on a worker thread: the setup is rebuilt from its flags (the
// same workload, prompts drawn from the same seeds) and every prompt is hashed here, on the second
// core, while the main thread simulates. Only the report reads the oracle when --gpu-blocks sizes the
// engines (docs/fleet-sim.md, "Scale"), at the end: it runs 10 nice below the simulation, in the
// time the simulation's threads leave idle (1,024 x 100,000: 22 CPU s, against ~600 s of a run).
import { parentPort, workerData } from 'node:worker_threads';
import { fleetSetup } from '../fleet.js';
import { oracle } from '../workloads/oracle.js';
import { lowerThreadPriority } from './priority.js';

/** How far below the simulation's thread the oracle runs (nice). */
const ORACLE_NICE = 10;

export interface OracleWorkerData {
  argv: string[];
}

const { argv } = workerData as OracleWorkerData;
lowerThreadPriority(ORACLE_NICE);
const s = await fleetSetup(argv);
try {
  parentPort!.postMessage(await oracle(s.workload, s.blockSize));
} finally {
  await s.workload.close();
}
