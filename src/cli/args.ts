/** Argument parsing shared by the subcommands: node's parseArgs, with usage errors as values. */
import { parseArgs, type ParseArgsConfig } from 'node:util';
import { InterlinkError } from '../errors.js';

type Options = NonNullable<ParseArgsConfig['options']>;

export interface Parsed {
  values: Record<string, string | boolean | undefined>;
  positionals: string[];
}

export function parse(argv: readonly string[], options: Options): Parsed {
  try {
    const { values, positionals } = parseArgs({
      args: [...argv],
      options: { ...options, help: { type: 'boolean', short: 'h' } },
      allowPositionals: true,
      strict: true,
    });
    return { values: values as Parsed['values'], positionals };
  } catch (err) {
    throw new InterlinkError('usage', (err as Error).message);
  }
}

export function expectPositionals(parsed: Parsed, count: number, usage: string): string[] {
  if (parsed.positionals.length !== count) throw new InterlinkError('usage', `usage: ${usage}`);
  return parsed.positionals;
}

/** Output for people, or one JSON document with --json. */
export function print(json: boolean, data: unknown, human: () => string): void {
  process.stdout.write(json ? JSON.stringify(data, null, 2) + '\n' : human() + '\n');
}
