// Placeholder until the subcommand lands.
export async function run(_argv: string[]): Promise<number> {
  process.stderr.write('kvrouter serve: not implemented yet\n');
  return 1;
}
