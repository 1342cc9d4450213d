/**
 * Damaged state files in words a person can act on: which file, what is wrong (with the
 * line where it can be found), where the original is now, and what does not work until
 * it is fixed. Read-only views leave a damaged file where it is and say so; writers move
 * it aside first (json-store.ts) and say where it went.
 */
import type { z } from 'zod';
import { log } from '../log.js';

export interface Damage {
  file: string;
  /** What is wrong, e.g. `line 1: expected {"key": …} for "bob", found a string`. */
  problem: string;
  /** Where the original went; absent when it was left in place. */
  movedTo?: string;
  /** What does not work until the file is fixed. */
  unavailable?: string;
}

const DEFAULT_UNAVAILABLE = 'what it holds is not used';

/** One sentence (a few clauses) naming the file, the problem, the original and the cost. */
export function damageSentence(damage: Damage): string {
  const where =
    damage.movedTo === undefined
      ? 'The file was left as it is; fix it in place.'
      : `The original was moved to ${damage.movedTo}; fix that copy and move it back, or write the file again.`;
  return `${damage.file} is damaged: ${damage.problem}. ${where} Until then ${damage.unavailable ?? DEFAULT_UNAVAILABLE}.`;
}

type Reporter = (damage: Damage, sentence: string) => void;

const logReporter: Reporter = (damage, sentence) => log.error('store_corrupt', { file: damage.file, movedTo: damage.movedTo, reason: damage.problem, message: sentence });
let reporter: Reporter = logReporter;

/**
 * Where a writer's move-aside is reported: by default a JSON log line carrying the
 * sentence (the MCP server's stderr is a log); a command at a terminal prints the
 * sentence itself.
 */
export function reportDamageWith(next: Reporter): void {
  reporter = next;
}

export function reportDamage(damage: Damage): string {
  const sentence = damageSentence(damage);
  reporter(damage, sentence);
  return sentence;
}

/** Line (1-based) of character offset `at` in `text`. */
function lineAt(text: string, at: number): number {
  return text.slice(0, at).split('\n').length;
}

/** Why `text` is not JSON, with the line where the parser stopped. */
export function jsonProblem(text: string, error: Error): string {
  if (text.trim() === '') return 'the file is empty';
  const position = /at position (\d+)/.exec(error.message);
  if (position) {
    const reason = error.message.replace(/ in JSON at position \d+.*$/, '').toLowerCase();
    return `line ${lineAt(text, Number(position[1]))}: not valid JSON (${reason})`;
  }
  if (/end of JSON input/i.test(error.message)) return `line ${lineAt(text, text.trimEnd().length)}: the JSON stops in the middle (cut short?)`;
  return `not valid JSON (${error.message})`;
}

/** "a string", "an array", "null"…: what a person would call the value found. */
export function kindOf(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'an array';
  const type = typeof value;
  return type === 'object' ? 'an object' : type === 'undefined' ? 'nothing' : `a ${type === 'bigint' ? 'number' : type}`;
}

const EXPECTED: Record<string, string> = { object: 'an object', record: 'an object', array: 'an array', string: 'a string', number: 'a number', boolean: 'true or false' };

function valueAt(data: unknown, path: readonly PropertyKey[]): unknown {
  let value = data;
  for (const step of path) value = typeof value === 'object' && value !== null ? (value as Record<PropertyKey, unknown>)[step] : undefined;
  return value;
}

/** The first schema issue, located by the line of its top-level key where that can be found. */
export function schemaProblem(text: string, data: unknown, error: z.ZodError): string {
  const issue = error.issues[0];
  if (issue === undefined) return 'it does not match its expected form';
  const top = issue.path[0];
  const keyAt = typeof top === 'string' ? memberAt(text, top) : -1;
  const line = keyAt >= 0 ? `line ${lineAt(text, keyAt)}: ` : '';
  const where = issue.path.length === 0 ? 'the whole file' : JSON.stringify(issue.path.map(String).join('.'));
  if (issue.code === 'invalid_type' && issue.message.startsWith('Invalid input')) {
    return `${line}expected ${EXPECTED[issue.expected] ?? issue.expected} for ${where}, found ${kindOf(valueAt(data, issue.path))}`;
  }
  // A custom message that names its entry already says where it is.
  const named = top !== undefined && issue.message.includes(JSON.stringify(String(top)));
  return named ? `${line}${issue.message}` : `${line}${where}: ${issue.message}`;
}

/**
 * Where `"<key>"` first appears as a member name (followed by white space and a colon),
 * or -1. A plain search, not a regular expression built from the key: a damaged file's
 * key may be any length, and a 300,000-character one made the pattern too large to compile.
 */
function memberAt(text: string, key: string): number {
  const quoted = JSON.stringify(key);
  for (let at = text.indexOf(quoted); at >= 0; at = text.indexOf(quoted, at + 1)) {
    let next = at + quoted.length;
    while (next < text.length && /\s/.test(text[next]!)) next++;
    if (text[next] === ':') return at;
  }
  return -1;
}
