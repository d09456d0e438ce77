// `kvrouter config-reference`: print the configuration reference table generated from the schema.
import { renderReference } from '../config/schema-dsl.js';
import { ROUTER_SCHEMA } from '../config/schema.js';

export async function run(_argv: string[]): Promise<number> {
  process.stdout.write(`${renderReference(ROUTER_SCHEMA)}\n`);
  return 0;
}
