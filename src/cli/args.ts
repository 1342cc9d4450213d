/**
 * Argument parsing shared by the subcommands. Not node's parseArgs: a public key is
 * base64url and may start with `-` or `--` (one key in 64), which parseArgs takes for an
 * option. Here a token is an option only if it has an option's shape — `--name`,
 * `--name=value` with a short lowercase name, or `-x` — and any other token, such as
 * `-lt3w…` or `--Nni2…`, is a positional. `--` ends the options.
 */
import { InterlinkError } from '../errors.js';

export interface OptionSpec {
  type: 'boolean' | 'string';
  short?: string;
}

export type Options = Record<string, OptionSpec>;

export interface Parsed {
  values: Record<string, string | boolean | undefined>;
  positionals: string[];
}

const OPTION_SHAPE = /^--[a-z][a-z0-9-]{0,31}(=|$)/;

export function parse(argv: readonly string[], options: Options): Parsed {
  const specs: Options = { ...options, help: { type: 'boolean', short: 'h' } };
  const byShort = new Map<string, string>(Object.entries(specs).flatMap(([name, spec]) => (spec.short ? [[`-${spec.short}`, name] as const] : [])));
  const values: Parsed['values'] = {};
  const positionals: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const token = argv[i]!;
    if (token === '--') {
      positionals.push(...argv.slice(i + 1));
      break;
    }
    let name: string | undefined;
    let inline: string | undefined;
    if (OPTION_SHAPE.test(token)) {
      const eq = token.indexOf('=');
      name = eq < 0 ? token.slice(2) : token.slice(2, eq);
      inline = eq < 0 ? undefined : token.slice(eq + 1);
      if (specs[name] === undefined) throw new InterlinkError('usage', `unknown option --${name}`);
    } else if (byShort.has(token)) {
      name = byShort.get(token)!;
    } else if (/^-[A-Za-z]$/.test(token)) {
      throw new InterlinkError('usage', `unknown option ${token}`);
    } else {
      positionals.push(token);
      continue;
    }
    const spec = specs[name]!;
    if (spec.type === 'boolean') {
      if (inline !== undefined) throw new InterlinkError('usage', `option --${name} takes no value`);
      values[name] = true;
    } else {
      const value = inline ?? argv[++i];
      if (value === undefined) throw new InterlinkError('usage', `option --${name} needs a value`);
      values[name] = value;
    }
  }
  return { values, positionals };
}

export function expectPositionals(parsed: Parsed, count: number, usage: string): string[] {
  if (parsed.positionals.length !== count) throw new InterlinkError('usage', `usage: ${usage}`);
  return parsed.positionals;
}

/** Output for people, or one JSON document with --json. */
let printed = false;

export function print(json: boolean, data: unknown, human: () => string): void {
  printed = true;
  process.stdout.write(json ? JSON.stringify(data, null, 2) + '\n' : human() + '\n');
}

/**
 * Whether the command already printed its result: a view that shows what it can and then
 * fails (a damaged file) has put its one JSON document on stdout, with the damage in it.
 */
export function resultPrinted(): boolean {
  return printed;
}

/** A missing or unknown subcommand (`peers frob`): a usage error of one line. */
export function unknownAction(action: string | undefined, actions: readonly string[]): InterlinkError {
  const what = action === undefined ? 'an action is missing' : `unknown action ${JSON.stringify(action)}`;
  return new InterlinkError('usage', `${what}; expected ${actions.join(', ')}`);
}
