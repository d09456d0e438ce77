// `kvrouter check-config FILE`: validate a router configuration without starting anything.
import { ConfigInvalidError, loadConfigFile } from '../config/load.js';
import { type OptionTable, parseCommand } from '../common/args.js';

const OPTIONS: OptionTable = {
  set: { type: 'string', multiple: true, arg: 'KEY=VALUE', help: 'apply an override before validating (repeatable)' },
};

export async function run(argv: string[]): Promise<number> {
  const parsed = parseCommand(
    'check-config',
    'Validate a YAML configuration (env KVROUTER_* overrides apply). Exit 0 when valid.',
    OPTIONS,
    argv,
  );
  if ('code' in parsed) return parsed.code;
  const file = parsed.positionals[0];
  if (!file) {
    process.stderr.write('kvrouter check-config: give the configuration file\n');
    return 2;
  }
  try {
    const cfg = loadConfigFile(file, { set: (parsed.values.set as string[] | undefined) ?? [], env: process.env });
    const instances = cfg.models.reduce((n, m) => n + m.instances.length, 0);
    process.stdout.write(
      `${file}: valid (${cfg.models.length} model(s), ${instances} instance(s)${cfg.engine_sim.count ? `, ${cfg.engine_sim.count} simulated engine(s)` : ''})\n`,
    );
    return 0;
  } catch (err) {
    if (err instanceof ConfigInvalidError) {
      process.stderr.write(`${err.message}\n`);
      return 1;
    }
    throw err;
  }
}
