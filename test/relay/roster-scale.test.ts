/**
 * Presence without a ceiling (issue 38, point 3): 5,000 sessions announced to a relay
 * sized for them (the roster grows with the connections a relay may hold), on the journal
 * store and, in the relay-postgres project, on PostgreSQL. The first session announced is
 * still found by its key, its fingerprint and its name bucket after all of them; a
 * reply holds what was asked for and nothing else, each entry only the announcement's
 * public fields.
 */
import { describe, expect, it } from 'vitest';
import { generateSigningKey, type SigningKey } from '../../src/identity/ed25519.js';
import { fingerprintOf } from '../../src/identity/identity.js';
import { signAnnouncementV3 } from '../../src/presence/announcement.js';
import { nameBucket, sealDetails } from '../../src/presence/private.js';
import { closedAfterEach } from '../helpers/relay-harness.js';
import { TestClient } from '../helpers/relay-test-client.js';
import { startTestRelay } from '../helpers/relay-store.js';

const SESSIONS = 5_000;
const FILLERS = 10;
const PUBLIC_FIELDS = ['details', 'key', 'name_bucket', 'name_tag', 'session', 'sig', 'slots', 'ts', 'v'];

const open = closedAfterEach();

function announcement(key: SigningKey, name: string, session: string) {
  const ts = Date.now();
  return signAnnouncementV3(key, { session, ts, ...sealDetails(key, session, ts, { name, cwd: '/w', git_root: '/w', summary: '' }, []), name_bucket: nameBucket(name) });
}

describe('a roster of 5,000 sessions', () => {
  it('finds the first one announced by key, fingerprint and name bucket, and answers only what was asked', async () => {
    const relay = await startTestRelay({ maxConnections: SESSIONS });
    open.relays.push(relay);
    // Ten connections of 500 announcements each: one connection's frame budget allows a burst of 4,000.
    const fillers: TestClient[] = [];
    for (let f = 0; f < FILLERS; f++) {
      const filler = await TestClient.connect(relay.url);
      open.clients.push(filler);
      expect(await filler.prove()).toMatchObject({ type: 'auth_ok' });
      fillers.push(filler);
    }
    const first = generateSigningKey();
    const firstKey = first.publicKey.toString('base64url');
    const keys: string[] = [firstKey];
    fillers[0]!.frame({ type: 'announce', announcement: announcement(first, 'the-first-one', 's0') });
    for (let i = 1; i < SESSIONS; i++) {
      const key = generateSigningKey();
      keys.push(key.publicKey.toString('base64url'));
      fillers[i % FILLERS]!.frame({ type: 'announce', announcement: announcement(key, `agent-${i}`, `s${i}`) });
    }
    let refs = 0;
    const askOn = async (client: TestClient, query: Record<string, unknown>) => {
      const ref = `q${refs++}`;
      const from = client.frames.length;
      client.frame({ type: 'roster', ref, ...query });
      const reply = await client.waitFor(`roster ${ref}`, (f) => 'ref' in f && f.ref === ref, from, 60_000);
      if (reply.type !== 'roster') throw new Error(`refused: ${JSON.stringify(reply)}`);
      return reply.entries.map((e) => e.announcement as { key: string; session: string });
    };
    // Frames of one connection are handled in order: each filler's answer follows its announcements.
    for (let f = 0; f < FILLERS; f++) {
      const lastOfFiller = SESSIONS - FILLERS + f;
      expect((await askOn(fillers[f]!, { keys: [keys[lastOfFiller]] })).map((a) => a.session), JSON.stringify(fillers[f]!.refusals().slice(0, 2))).toEqual([`s${lastOfFiller}`]);
    }
    expect(fillers.flatMap((c) => c.refusals())).toEqual([]);
    const ask = (_ref: string, query: Record<string, unknown>) => askOn(fillers[0]!, query);

    const byKey = await ask('key', { keys: [firstKey] });
    expect(byKey.map((a) => a.session)).toEqual(['s0']);
    expect(Object.keys(byKey[0]!).sort()).toEqual(PUBLIC_FIELDS);
    expect((await ask('fingerprint', { fingerprints: [fingerprintOf(first.publicKey)] })).map((a) => a.key)).toEqual([firstKey]);
    const bucket = await ask('bucket', { name_bucket: nameBucket('the-first-one') });
    expect(bucket.map((a) => a.key)).toContain(firstKey);
    // A bucket holds about SESSIONS / 4096 sessions: a few, never the roster.
    expect(bucket.length).toBeLessThan(20);
    // 256 keys at once: exactly those.
    const many = await ask('many', { keys: keys.slice(1000, 1256) });
    expect(new Set(many.map((a) => a.key))).toEqual(new Set(keys.slice(1000, 1256)));
  }, 120_000);
});
