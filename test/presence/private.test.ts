/**
 * Presence only peers can read (presence/private.ts, announcement version 2): the details
 * open for every reader the announcer named and for nobody else; a stranger learns the
 * key, the session and a name tag that answers only a name it already knows; any change
 * breaks the signature or the seal; the relay's roster keeps version 2 announcements.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { generateSigningKey, type SigningKey } from '../../src/identity/ed25519.js';
import { announcementV2Bytes, signAnnouncementV2, signAnnouncementV3, verifiedAnnouncement, type AnnouncementV2 } from '../../src/presence/announcement.js';
import { nameBucket, nameTag, openDetails, sealDetails, type Details } from '../../src/presence/private.js';
import { Roster } from '../../src/relay/roster.js';

const text = (k: SigningKey) => k.publicKey.toString('base64url');
const alice = generateSigningKey();
const bob = generateSigningKey();
const carol = generateSigningKey();
const stranger = generateSigningKey();
const DETAILS: Details = { name: 'alice@laptop', cwd: '/home/alice/secret-project', git_root: '/home/alice/secret-project', summary: 'rewriting the billing service' };

function announce(details: Details = DETAILS, readers = [text(alice), text(bob), text(carol)], ts = 1_767_225_600_000): AnnouncementV2 {
  return signAnnouncementV2(alice, { session: 'desk', ts, ...sealDetails(alice, 'desk', ts, details, readers) });
}

describe('sealed details', () => {
  it('open for each reader named, the announcer included, and for nobody else', () => {
    const a = announce();
    expect(verifiedAnnouncement(JSON.parse(JSON.stringify(a)))).toEqual(a);
    for (const reader of [alice, bob, carol]) expect(openDetails(reader, a)).toEqual(DETAILS);
    expect(openDetails(stranger, a)).toBeUndefined();
    // What a stranger (or a relay) holds: nothing of the details in clear.
    const seen = JSON.stringify(a);
    for (const secret of ['alice@laptop', 'secret-project', 'billing']) expect(seen).not.toContain(secret);
    expect(Object.keys(a).sort()).toEqual(['details', 'key', 'name_tag', 'session', 'sig', 'slots', 'ts', 'v']);
  });

  it('round-trip any details for any set of readers', () => {
    const field = fc.string({ unit: 'grapheme', maxLength: 60 });
    fc.assert(
      fc.property(fc.record({ name: field, cwd: field, git_root: field, summary: field }), fc.subarray([bob, carol, stranger]), (details, chosen) => {
        const a = announce(details, chosen.map(text));
        for (const reader of [bob, carol, stranger]) expect(openDetails(reader, a)).toEqual(chosen.includes(reader) ? details : undefined);
      }),
      { numRuns: 60 },
    );
  });

  it('give a name tag that answers a known name and tells nothing else', () => {
    const a = announce();
    expect(a.name_tag).toBe(nameTag(text(alice), 'alice@laptop'));
    expect(a.name_tag).not.toBe(nameTag(text(alice), 'alice'));
    // Bound to the key: the same name under another key has another tag.
    expect(nameTag(text(bob), 'alice@laptop')).not.toBe(a.name_tag);
  });

  it('change their hints and ciphertexts with every announcement, so two cannot be linked by them', () => {
    const [one, two] = [announce(DETAILS, undefined, 1_000_000), announce(DETAILS, undefined, 1_000_001)];
    expect(one.slots.map((s) => s.hint)).not.toEqual(expect.arrayContaining(two.slots.map((s) => s.hint)));
    expect(one.details).not.toBe(two.details);
  });

  it('refuse any change: a relay editing a field breaks the signature, a swapped slot or body does not open', () => {
    const a = announce();
    for (const edited of [
      { ...a, session: 'other' },
      { ...a, ts: a.ts + 1 },
      { ...a, name_tag: nameTag(text(alice), 'bob') },
      { ...a, slots: a.slots.slice(1) },
      { ...a, details: announce({ ...DETAILS, summary: 'other' }).details },
    ]) {
      expect(verifiedAnnouncement(edited)).toBeUndefined();
    }
    // Re-signed by the announcer with a body from another announcement: the content key does not fit.
    const other = announce({ ...DETAILS, summary: 'something else' });
    const { sig: _sig, v: _v, key: _key, ...fields } = { ...a, details: other.details };
    const spliced = signAnnouncementV2(alice, fields);
    expect(openDetails(bob, spliced)).toBeUndefined();
    // Details naming another name than the signed tag are not the announcer's details.
    const misnamed = signAnnouncementV2(alice, { ...fields, details: a.details, name_tag: nameTag(text(alice), 'someone-else') });
    expect(openDetails(bob, misnamed)).toBeUndefined();
  });

  it('sign exactly the documented bytes', () => {
    const a = announce();
    const { sig: _sig, ...unsigned } = a;
    const bytes = announcementV2Bytes(unsigned);
    expect(bytes.subarray(0, 22).toString('latin1')).toBe('interlink-announce-v2\0');
    expect(bytes.subarray(22, 54).equals(alice.publicKey)).toBe(true);
  });
});

describe('version 3: the name bucket', () => {
  it('is 12 bits of a hash of the name alone, signed: a changed bucket breaks the signature', () => {
    expect(nameBucket('alice')).toBe(nameBucket('alice'));
    const buckets = new Set(Array.from({ length: 2000 }, (_, i) => nameBucket(`name-${i}`)));
    expect(Math.max(...buckets)).toBeLessThan(4096);
    expect(buckets.size).toBeGreaterThan(1500);
    const ts = 7;
    const sealed = sealDetails(alice, 's', ts, { name: 'alice', cwd: '/a', git_root: '', summary: '' }, [alice.publicKey.toString('base64url')]);
    const v3 = signAnnouncementV3(alice, { session: 's', ts, ...sealed, name_bucket: nameBucket('alice') });
    expect(verifiedAnnouncement(v3)).toEqual(v3);
    expect(verifiedAnnouncement({ ...v3, name_bucket: (v3.name_bucket + 1) % 4096 })).toBeUndefined();
    // Not a version 2 announcement with a field added: the domain differs.
    expect(verifiedAnnouncement({ ...v3, v: 2 })).toBeUndefined();
    const { sig: _sig, ...unsigned } = v3;
    const bytes = announcementV2Bytes(unsigned);
    expect(bytes.subarray(0, 22).toString('latin1')).toBe('interlink-announce-v3\0');
    expect(bytes.readUInt16LE(bytes.length - 2)).toBe(v3.name_bucket);
    expect(openDetails(alice, v3)).toMatchObject({ name: 'alice' });
  });
});

describe('the relay roster', () => {
  it('keeps version 2 announcements and hands them out as they came', () => {
    const roster = new Roster();
    const a = announce();
    expect(roster.announce(a)).toBe('stored');
    expect(roster.list().map((e) => e.announcement)).toEqual([a]);
    expect(roster.announce({ ...a, summary: 'added by someone' })).toBe('stored');
    expect(roster.announce({ ...a, session: 'x' })).toBe('invalid');
  });
});
