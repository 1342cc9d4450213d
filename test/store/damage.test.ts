/**
 * The words for a damaged state file (store/damage.ts): the problem located by line,
 * the sentence with where the original is and what is unavailable, and a writer's
 * move-aside reported through the reporter with the same sentence.
 */
import { mkdtemp, readFile, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { damageSentence, jsonProblem, kindOf, reportDamageWith, schemaProblem, type Damage } from '../../src/store/damage.js';
import { readJson } from '../../src/store/json-store.js';
import { peersFileSchema } from '../../src/peers/peers.js';
import { newIdentity } from '../helpers/fixtures.js';

function problemOf(text: string, schema: z.ZodType = peersFileSchema): string {
  let data: unknown;
  try {
    data = JSON.parse(text);
  } catch (err) {
    return jsonProblem(text, err as Error);
  }
  const parsed = schema.safeParse(data);
  if (parsed.success) throw new Error('valid');
  return schemaProblem(text, data, parsed.error);
}

describe('the problem, located', () => {
  const key = newIdentity(1).key;
  it.each([
    ['an empty file', '', 'the file is empty'],
    ['a file cut short', '{\n  "bob": {"key": ', 'line 2: the JSON stops in the middle (cut short?)'],
    ['a stray character', '{\n  "bob": {"key": "x"},\n  ]\n}', "line 3: not valid JSON (expected double-quoted property name)"],
    ['the hand edit {"bob": "<key>"}', `{\n  "alice": {"key": "${key}"},\n  "bob": "${key}"\n}`, 'line 3: expected {"key": "<base64url public key>"} for "bob", found a string; write it as {"bob": {"key": "<key>"}}'],
    ['an entry without a key', '{"bob": {"name": "bob"}}', 'line 1: expected {"key": "<base64url public key>"} for "bob", found an object without a "key" string; write it as {"bob": {"key": "<key>"}}'],
    ['a key that is no key', '{\n\n  "bob": {"key": "AAAA"}\n}', 'line 3: "bob.key": not a usable base64url Ed25519 public key'],
    ['an array', '[]', 'expected an object for the whole file, found an array'],
  ])('%s', (_label, text, problem) => {
    expect(problemOf(text)).toBe(problem);
  });

  it('locates a member whose name is 300,000 characters long (no pattern is built from it), and one written with spaces before its colon', () => {
    const long = 'x'.repeat(300_000);
    expect(problemOf(`{\n  "bob": {"key": "${key}"},\n  "${long}": 1\n}`).slice(0, 8)).toBe('line 3: ');
    expect(problemOf(`{\n  "bob" \n\t: 7\n}`)).toMatch(/^line 2: /);
    // The name as a value (line 2) is not the member (line 3).
    expect(problemOf(`{\n  "a": {"key": "bob"},\n  "bob": 7\n}`)).toMatch(/^line 3: /);
  });

  it('reads the position from newer Node messages too', () => {
    expect(jsonProblem('{\n  x', new SyntaxError("Expected property name or '}' in JSON at position 4 (line 2 column 3)"))).toBe(
      "line 2: not valid JSON (expected property name or '}')",
    );
  });

  it('names what was found as a person would', () => {
    expect([null, [], {}, 'x', 1, true, undefined].map(kindOf)).toEqual(['null', 'an array', 'an object', 'a string', 'a number', 'a boolean', 'nothing']);
  });
});

describe('the sentence', () => {
  const damage: Damage = { file: '/c/peers.json', problem: 'line 2: the JSON stops in the middle (cut short?)', unavailable: 'the peers it lists cannot write' };
  it('says the file was left when it was', () => {
    expect(damageSentence(damage)).toBe(
      '/c/peers.json is damaged: line 2: the JSON stops in the middle (cut short?). The file was left as it is; fix it in place. Until then the peers it lists cannot write.',
    );
  });
  it('says where the original went when it was moved', () => {
    expect(damageSentence({ ...damage, movedTo: '/c/peers.json.corrupt-1' })).toContain('The original was moved to /c/peers.json.corrupt-1; fix that copy and move it back, or write the file again.');
  });
});

describe('a writer that moves a file aside', () => {
  let dir: string | undefined;
  afterEach(async () => {
    reportDamageWith(() => undefined);
    if (dir !== undefined) await rm(dir, { recursive: true, force: true });
  });

  it('reports the sentence with the aside path and what is unavailable', async () => {
    dir = await mkdtemp(join(tmpdir(), 'interlink-damage-'));
    const file = join(dir, 'state.json');
    await writeFile(file, '{"n": "one"}');
    const reported: string[] = [];
    reportDamageWith((_damage, sentence) => reported.push(sentence));
    const { value, recovered } = await readJson(file, z.object({ n: z.number() }), () => ({ n: 0 }), { unavailable: 'n is zero' });
    expect(value).toEqual({ n: 0 });
    const [aside] = (await readdir(dir)).filter((name) => name.startsWith('state.json.corrupt-'));
    expect(await readFile(join(dir, aside!), 'utf8')).toBe('{"n": "one"}');
    expect(reported).toEqual([
      `${file} is damaged: line 1: expected a number for "n", found a string. The original was moved to ${join(dir, aside!)}; fix that copy and move it back, or write the file again. Until then n is zero.`,
    ]);
    expect(recovered?.message).toBe(reported[0]);
  });
});
