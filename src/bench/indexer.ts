// Placeholder until this benchmark lands.
export async function run(_argv: string[]): Promise<number> {
  process.stderr.write('not implemented yet\n');
  return 1;
}
