/**
 * One error vocabulary (src/errors.ts): every code the documentation names is declared
 * there, each declared code has a meaning, and the two tables docs/PROTOCOL.md gives (the
 * trust gate's checks, the relay's refusal codes) list exactly the codes the code uses.
 * The documents are read as they are, so a code added to them without a declaration, or
 * a pattern that stopped finding codes, fails here.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { CODE_MEANINGS, CODE_SETS, REFUSAL_CODES, REJECT_CODES, type Code } from '../../src/errors.js';
import { refusedFrame } from '../../src/wire/frames.js';

const README = readFileSync(new URL('../../README.md', import.meta.url), 'utf8');
const PROTOCOL = readFileSync(new URL('../../docs/PROTOCOL.md', import.meta.url), 'utf8');
/** The codes the public contract names (it lives outside the repository): `too_large`, from send_message. */
const CONTRACT_CODES = ['too_large'];

const vocabulary = new Set<string>(Object.values(CODE_SETS).flat());

function all(text: string, pattern: RegExp): string[] {
  return [...text.matchAll(pattern)].map((m) => m[1]!);
}

/**
 * The codes a text names: "code `x`", `"code": "x"`, and the codes in parentheses after
 * "refuses"/"refused" in the same sentence (up to a `;`, after which the text goes on
 * about something else).
 */
function namedCodes(text: string): string[] {
  const refusals = all(text, /refus(?:es|ed)\b[^.()]*\(([^)]*)\)/g).flatMap((inside) => all(inside.split(';')[0]!, /`([a-z_]+)`/g));
  return [...all(text, /\bcodes? `([a-z_]+)`/g), ...all(text, /"code":\s*"([a-z_]+)"/g), ...refusals];
}

/** The text of one `### ` section of docs/PROTOCOL.md, up to the next heading. */
function section(title: string): string {
  const start = PROTOCOL.indexOf(`\n### ${title}\n`);
  expect(start, `docs/PROTOCOL.md has a section "${title}"`).toBeGreaterThanOrEqual(0);
  const rest = PROTOCOL.slice(start + title.length + 6);
  const end = rest.search(/\n#{2,3} /);
  return end < 0 ? rest : rest.slice(0, end);
}

describe('the error vocabulary', () => {
  it('gives every code of every set a meaning, and has no meaning for a code no set lists', () => {
    for (const code of vocabulary) expect(CODE_MEANINGS[code as Code], code).toMatch(/\S/);
    expect(Object.keys(CODE_MEANINGS).sort()).toEqual([...vocabulary].sort());
  });

  it('declares every code README.md and docs/PROTOCOL.md name', () => {
    const readme = namedCodes(README);
    const protocol = namedCodes(PROTOCOL);
    // The patterns still find what the documents are known to name.
    expect(readme).toEqual(expect.arrayContaining(['own_key', 'empty_text', 'bad_config']));
    expect(protocol).toEqual(expect.arrayContaining(['too_large', 'bad_envelope', 'bad_key', 'auth_failed', 'not_authenticated', 'storage', 'unsupported_kind']));
    expect([...readme, ...protocol].filter((code) => !vocabulary.has(code))).toEqual([]);
  });

  it('declares every code the contract names', () => {
    expect(CONTRACT_CODES.filter((code) => !vocabulary.has(code))).toEqual([]);
  });

  it("lists the trust gate's codes exactly as docs/PROTOCOL.md's checks do", () => {
    const documented = all(section('Receiving: the trust gate'), /\((?:otherwise\s+)?`([a-z_]+)`\)/g);
    expect(new Set(documented)).toEqual(new Set(REJECT_CODES));
  });

  it("lists the relay's refusal codes exactly as docs/PROTOCOL.md's table does, and the refused frame takes them all", () => {
    const documented = all(section('Refusal codes'), /^\| `([a-z_]+)` \|/gm);
    expect(new Set(documented)).toEqual(new Set(REFUSAL_CODES));
    for (const code of REFUSAL_CODES) expect(refusedFrame.safeParse({ v: 1, type: 'refused', code, message: 'm' }).success, code).toBe(true);
    expect(refusedFrame.safeParse({ v: 1, type: 'refused', code: 'bad_envelope', message: 'm' }).success).toBe(false);
  });
});
