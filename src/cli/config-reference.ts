// `kvrouter config-reference`: the configuration reference generated from the schema
// (docs/configuration.md is exactly this output: `npm run docs:config` rewrites it).
import { renderReference } from '../common/schema-dsl.js';
import { ROUTER_SCHEMA } from '../config/schema.js';

export const INTRO = `# Configuration reference

\`kvrouter serve --config FILE\` reads YAML. Every key below is validated at start: an unknown key,
a wrong type or an out-of-range value stops the router with the key path and the problem
(\`kvrouter check-config FILE\` runs the same checks without starting anything).

Overrides, applied in this order after the file:
- environment: \`KVROUTER_<PATH>\` with \`__\` between keys, e.g. \`KVROUTER_SERVER__PORT=9000\`,
  \`KVROUTER_ROUTING__OVERLAP_WEIGHT=2\`, \`KVROUTER_MODELS__0__BLOCK_SIZE=64\`;
- command line: \`--set routing.temperature=0.5\` (repeatable), \`--port\`, \`--host\`, \`--policy\`.

Values are parsed as YAML scalars (\`true\`, \`2\`, \`0.5\`, strings). The table is generated from the
schema in \`src/config/schema.ts\` (\`kvrouter config-reference\` prints it); a test fails when they
differ.

`;

export function configReference(): string {
  return `${INTRO}${renderReference(ROUTER_SCHEMA)}\n`;
}

export async function run(_argv: string[]): Promise<number> {
  process.stdout.write(configReference());
  return 0;
}
