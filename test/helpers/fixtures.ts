// Files under test/fixtures/ (copied into the repository; see its README for their source).
import { readFileSync } from 'node:fs';

export const fixturePath = (name: string): string => new URL(`../fixtures/${name}`, import.meta.url).pathname;
export const fixture = (name: string): string => readFileSync(fixturePath(name), 'utf8');
