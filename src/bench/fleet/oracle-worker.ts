// The oracle of a `bench fleet` setup on a worker thread: the setup is rebuilt from its flags (the
// same workload, prompts drawn from the same seeds) and every prompt is hashed here, on the second
// core, while the main thread simulates. Only the report reads the oracle when --gpu-blocks sizes the
// engines (docs/fleet-sim.md, "Scale").
import { parentPort, workerData } from 'node:worker_threads';
import { fleetSetup } from '../fleet.js';
import { oracle } from '../workloads/oracle.js';

export interface OracleWorkerData {
  argv: string[];
}

const { argv } = workerData as OracleWorkerData;
const s = await fleetSetup(argv);
try {
  parentPort!.postMessage(await oracle(s.workload, s.blockSize));
} finally {
  await s.workload.close();
}
