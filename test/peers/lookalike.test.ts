/**
 * Petnames that look the same (peers/lookalike.ts): the skeleton merges case, compatibility
 * forms, the Cyrillic and Greek letters drawn like Latin ones and 0/1 for o/l, and keeps
 * apart names a reader tells apart (accents, CJK, "ali" and "all"). peers.json refuses a
 * second petname with the skeleton of one it holds, naming that one.
 */
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { encodeBase64url } from '../../src/identity/base64url.js';
import { generateSigningKey } from '../../src/identity/ed25519.js';
import { lookalikeOf, skeleton } from '../../src/peers/lookalike.js';
import { addPeer } from '../../src/peers/peers.js';
import { rejectsWith } from '../helpers/assert.js';

const newKey = (): string => encodeBase64url(generateSigningKey().publicKey);

describe('skeleton', () => {
  it.each([
    ['bob', 'Bob'],
    ['bob', 'BOB'],
    ['alice', '\u0430lice'], // Cyrillic а
    ['scott', '\u0455\u0441\u043ett'], // Cyrillic ѕ с о
    ['paypal', '\u0440\u0430y\u0440\u0430l'], // Cyrillic р а
    ['nova', 'n\u03bf\u03bda'], // Greek ο ν
    ['bob', 'b0b'],
    ['bill', 'bi1l'],
    ['bob', '\uff42\uff4f\uff42'], // full-width
    ['team-a', 'team\u2010a'], // a hyphen that is not the ASCII one
    ['team-a', 'team_a'],
    ['exit', 'ex\u0456t'], // Cyrillic і
    ['bob', 'b\u200bob'], // a zero-width space, as a petname stored before the rule may hold
  ])('%j and %j look the same', (a, b) => {
    expect(skeleton(a)).toBe(skeleton(b));
  });

  it.each([
    ['josé', 'jose'],
    ['ali', 'all'],
    ['bob', 'rob'],
    ['山田', '山口'],
    ['alice', 'alice2'],
  ])('%j and %j do not', (a, b) => {
    expect(skeleton(a)).not.toBe(skeleton(b));
  });

  it('merges every case change and every table look-alike swapped into a name', () => {
    const swaps: Record<string, string[]> = { a: ['\u0430', '\u03b1'], e: ['\u0435', '\u03b5'], o: ['\u043e', '\u03bf', '0'], p: ['\u0440', '\u03c1'], c: ['\u0441'], x: ['\u0445', '\u03c7'], i: ['\u0456', '\u03b9'] };
    const base = fc.string({ unit: fc.constantFrom(...'aeopcxibdmn'), minLength: 1, maxLength: 12 });
    fc.assert(
      fc.property(base, fc.array(fc.nat()), fc.boolean(), (name, picks, upper) => {
        let k = 0;
        const disguised = [...name].map((ch) => {
          const options = swaps[ch];
          const pick = picks[k++];
          return options === undefined || pick === undefined || pick % 2 === 0 ? ch : options[pick % options.length]!;
        }).join('');
        expect(skeleton(upper ? disguised.toUpperCase() : disguised)).toBe(skeleton(name));
        expect(lookalikeOf(disguised, ['zzz', name])).toBe(disguised === name ? undefined : name);
      }),
    );
  });
});

describe('peers.json refuses a look-alike petname', () => {
  let dir: string;
  let peersFile: string;
  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'interlink-lookalike-'));
    peersFile = join(dir, 'peers.json');
  });
  afterEach(() => rm(dir, { recursive: true, force: true }));

  it('as peer_conflict naming the existing petname, and leaves the file as it was', async () => {
    await addPeer(peersFile, 'bob', newKey());
    const before = await readFile(peersFile, 'utf8');
    for (const lookalike of ['Bob', 'b0b', 'b\u043eb']) {
      const err = await rejectsWith(addPeer(peersFile, lookalike, newKey()), 'peer_conflict');
      expect(err.message).toContain('"bob"');
    }
    expect(await readFile(peersFile, 'utf8')).toBe(before);
  });

  it('takes names that only resemble each other, and stores them in NFC', async () => {
    for (const name of ['josé', 'jose', 'ali', 'all', '山田', '山口']) await addPeer(peersFile, name, newKey());
    const added = await addPeer(peersFile, 'Zoe\u0308', newKey());
    expect(added.petname).toBe('Zoë');
    expect(Object.keys(JSON.parse(await readFile(peersFile, 'utf8')) as object)).toContain('Zoë');
  });
});
