/**
 * PairingStore (src/pairing/store.ts) on real files in a temporary directory: transitions
 * run under the lock and persist, a refused transition writes nothing, a damaged file is
 * moved aside and the store carries on from empty, and concurrent updates (promises in
 * one process, and several processes) all apply.
 */
import { readFile, readdir, stat, writeFile, mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import {
  HANDLED_MS,
  MAX_OUTGOING,
  admitRequest,
  commitAccept,
  controlDone,
  emptyPairing,
  planRequest,
  reject,
  type ControlJob,
  type Incoming,
  type PairingData,
} from '../../src/pairing/rules.js';
import { pairingPath } from '../../src/config/layout.js';
import { PairingStore } from '../../src/pairing/store.js';
import { captureStderr, rejectsWith, throwsWith } from '../helpers/assert.js';
import { raceChildren, reapChildren, startLine, writeScript } from '../helpers/children.js';
import { newIdentity, tempDir } from '../helpers/fixtures.js';

const DIST = fileURLToPath(new URL('../../dist/src/', import.meta.url));
const T0 = 1_900_000_000_000;
const msgId = (n: number): string => n.toString(16).padStart(32, '0');
const ASIDE = /^s1\.json\.corrupt-\d{4}-\d{2}-\d{2}T\d{2}-\d{2}-\d{2}-\d{3}Z-[0-9a-f]{6}$/;

let dir: { path: string; remove: () => Promise<void> };
let file: string;

beforeEach(async () => {
  dir = await tempDir('interlink-pairing-store-');
  file = pairingPath(dir.path, 'me-identity', 's1');
});

afterEach(async () => {
  vi.restoreAllMocks();
  await reapChildren();
  await dir.remove();
});

const ann = newIdentity(30);
const ben = newIdentity(31);

/** A request received at `now` and signed then, so a later one from the same key is newer. */
function incoming(from: { key: string; fingerprint: string }, requestId: string, now = T0): Incoming {
  return { request_id: requestId, from: from.key, fingerprint: from.fingerprint, claimed_name: 'someone', session: 'theirs', received_at: now, code: 'c', ts: now };
}

function request(to: string, requestId: string) {
  return { request_id: requestId, to, session: 'their-session', petname: 'pet', created_at: T0, code: 'c', text: 'me' };
}

async function fileState(path: string): Promise<{ bytes: string; ino: number; mtimeMs: number } | undefined> {
  try {
    const [bytes, info] = await Promise.all([readFile(path, 'utf8'), stat(path)]);
    return { bytes, ino: info.ino, mtimeMs: info.mtimeMs };
  } catch {
    return undefined;
  }
}

/** Files in the store's directory, apart from the sidecar lock's leftovers. */
async function listing(): Promise<string[]> {
  return (await readdir(join(dir.path, 'pairing', 'me-identity'))).filter((name) => !name.endsWith('.lock')).sort();
}

describe('pairingPath', () => {
  it('is pairing/<identity>/<session>.json under the state directory', () => {
    expect(pairingPath('/state', 'abc', 'sess-1')).toBe(join('/state', 'pairing', 'abc', 'sess-1.json'));
  });

  it('refuses a session id that could leave the directory', () => {
    for (const session of ['', '..', '../x', 'a/b', 'a\\b']) {
      throwsWith(() => pairingPath('/state', 'abc', session), 'bad_name', session);
    }
  });
});

describe('PairingStore', () => {
  it('reads an absent file as empty without creating it', async () => {
    expect(await new PairingStore(file).read()).toEqual(emptyPairing());
    expect(await fileState(file)).toBeUndefined();
  });

  it('runs a transition, returns its result and persists it for a new store on the same path', async () => {
    const store = new PairingStore(file);
    const planned = await store.update((data) => planRequest(data, request(ann.key, msgId(1))));
    expect(planned.repeated).toBe(false);
    const admitted = await store.update((data) => admitRequest(data, incoming(ben, msgId(2)), T0));
    expect(admitted).toBe('stored');

    const reopened = await new PairingStore(file).read();
    expect(reopened.outgoing.map((o) => [o.to, o.request_id])).toEqual([[ann.key, msgId(1)]]);
    expect(reopened.control.map((c) => [c.kind, c.msg_id])).toEqual([['pair_request', msgId(1)]]);
    expect(reopened.incoming).toEqual([incoming(ben, msgId(2))]);
    expect(JSON.parse(await readFile(file, 'utf8'))).toEqual(reopened);

    // A second store on the same path continues from what the first wrote.
    const other = new PairingStore(file);
    const job: ControlJob = { msg_id: msgId(3), kind: 'pair_accept', to: ben.key, session: 'theirs', text: 'me', in_reply_to: msgId(2), created_at: T0 };
    expect(await other.update((data) => commitAccept(data, incoming(ben, msgId(2)), job, T0 + 1))).toEqual({ queued: true });
    await store.update((data) => controlDone(data, msgId(1)));
    const final = await new PairingStore(file).read();
    expect(final.incoming).toEqual([]);
    expect(final.control).toEqual([job]);
    expect(final.outgoing).toHaveLength(1);
    expect(final.handled).toEqual([{ from: ben.key, msg_id: msgId(2), outcome: 'accepted', until: T0 + 1 + HANDLED_MS }]);
    expect(HANDLED_MS).toBe(7 * 24 * 60 * 60 * 1000 + 60_000 + 1);
  });

  it('sees the data as it is when the transition runs', async () => {
    const store = new PairingStore(file);
    await store.update((data) => planRequest(data, request(ann.key, msgId(1))));
    let seen: PairingData | undefined;
    const repeated = await store.update((data) => {
      seen = data;
      return planRequest(data, request(ann.key, msgId(9)));
    });
    expect(seen?.outgoing.map((o) => o.request_id)).toEqual([msgId(1)]);
    expect(repeated.repeated).toBe(true);
    expect(repeated.outgoing.request_id).toBe(msgId(1));
  });

  it('writes nothing for a transition that changes nothing', async () => {
    const store = new PairingStore(file);
    expect(await store.update((data) => controlDone(data, msgId(1)))).toBeUndefined();
    expect(await fileState(file)).toBeUndefined();
    await store.update((data) => admitRequest(data, incoming(ann, msgId(1)), T0));
    const before = await fileState(file);
    expect(await store.update((data) => admitRequest(data, incoming(ann, msgId(1)), T0))).toBe('duplicate');
    expect(await fileState(file)).toEqual(before);
    // A newer request from the key replaces it; the older one replayed then changes nothing.
    expect(await store.update((data) => admitRequest(data, incoming(ann, msgId(2), T0 + 1), T0 + 1))).toBe('replaced');
    const replaced = await fileState(file);
    expect(await store.update((data) => admitRequest(data, { ...incoming(ann, msgId(1)), received_at: T0 + 2 }, T0 + 2))).toBe('duplicate');
    expect(await fileState(file)).toEqual(replaced);
    expect((await store.read()).incoming).toEqual([incoming(ann, msgId(2), T0 + 1)]);
  });

  it('writes nothing when the transition throws, and passes the error on', async () => {
    const store = new PairingStore(file);
    await rejectsWith(
      store.update((data) => reject(data, ann.fingerprint, T0)),
      'unknown_request',
    );
    expect(await fileState(file)).toBeUndefined();

    for (let i = 0; i < MAX_OUTGOING; i++) await store.update((data) => planRequest(data, request(`key-${i}`, msgId(100 + i))));
    const before = await fileState(file);
    await rejectsWith(
      store.update((data) => planRequest(data, request(ann.key, msgId(1)))),
      'pairing_full',
    );
    await expect(
      store.update(() => {
        throw new Error('boom');
      }),
    ).rejects.toThrow('boom');
    expect(await fileState(file)).toEqual(before);
    expect((await store.read()).outgoing).toHaveLength(MAX_OUTGOING);
    expect(await listing()).toEqual(['s1.json']);
  });

  describe('a damaged file', () => {
    const damaged: Array<[string, string]> = [
      ['garbage', 'this is not json {'],
      ['empty', ''],
      ['truncated', '{"v":1,"outgoing":[],"incoming":[],"control":[],"hand'],
      ['null', 'null'],
      ['an array', '[]'],
      ['another version', JSON.stringify({ ...emptyPairing(), v: 2 })],
      ['a missing list', JSON.stringify({ v: 1, outgoing: [], incoming: [], control: [] })],
      ['a list of the wrong type', JSON.stringify({ ...emptyPairing(), control: {} })],
      ['an entry missing a field', JSON.stringify({ ...emptyPairing(), incoming: [{ request_id: 'x', from: 'y' }] })],
      ['an unknown control kind', JSON.stringify({ ...emptyPairing(), control: [{ msg_id: 'm', kind: 'message', to: 't', session: 's', text: '', created_at: 1 }] })],
      ['an unknown outcome', JSON.stringify({ ...emptyPairing(), handled: [{ from: 'f', msg_id: 'm', outcome: 'ignored', until: 1 }] })],
      ['a fractional time', JSON.stringify({ ...emptyPairing(), handled: [{ from: 'f', msg_id: 'm', outcome: 'accepted', until: 1.5 }] })],
    ];

    for (const [label, content] of damaged) {
      it(`(${label}) is moved aside on read and the store carries on from empty`, async () => {
        const logged = captureStderr();
        await mkdir(join(dir.path, 'pairing', 'me-identity'), { recursive: true });
        await writeFile(file, content);
        const store = new PairingStore(file);
        expect(await store.read()).toEqual(emptyPairing());
        const names = await listing();
        expect(names).toHaveLength(1);
        expect(names[0]).toMatch(ASIDE);
        expect(await readFile(join(dir.path, 'pairing', 'me-identity', names[0]!), 'utf8')).toBe(content);
        expect(logged.join('')).toContain('store_corrupt');

        expect(await store.update((data) => admitRequest(data, incoming(ann, msgId(1)), T0))).toBe('stored');
        expect((await new PairingStore(file).read()).incoming).toEqual([incoming(ann, msgId(1))]);
        expect((await listing()).filter((name) => name === 's1.json')).toEqual(['s1.json']);
      });
    }

    it('is moved aside by an update too, which then runs on empty data', async () => {
      captureStderr();
      await mkdir(join(dir.path, 'pairing', 'me-identity'), { recursive: true });
      await writeFile(file, '{{{');
      let given: PairingData | undefined;
      const result = await new PairingStore(file).update((data) => {
        given = data;
        return admitRequest(data, incoming(ann, msgId(1)), T0);
      });
      expect(given).toEqual(emptyPairing());
      expect(result).toBe('stored');
      const names = await listing();
      expect(names.filter((name) => ASIDE.test(name))).toHaveLength(1);
      expect(names).toContain('s1.json');
    });

    it('is moved aside even when the transition then changes nothing', async () => {
      captureStderr();
      await mkdir(join(dir.path, 'pairing', 'me-identity'), { recursive: true });
      await writeFile(file, 'nope');
      await new PairingStore(file).update((data) => controlDone(data, msgId(1)));
      const names = await listing();
      expect(names).toHaveLength(1);
      expect(names[0]).toMatch(ASIDE);
      expect(await new PairingStore(file).read()).toEqual(emptyPairing());
    });
  });

  it('applies 20 concurrent updates from promises, none lost', async () => {
    const parties = Array.from({ length: 20 }, (_, i) => newIdentity(40 + i));
    const results = await Promise.all(
      parties.map((party, i) => new PairingStore(file).update((data) => admitRequest(data, incoming(party, msgId(i + 1)), T0))),
    );
    expect(results).toEqual(Array(20).fill('stored'));
    const data = await new PairingStore(file).read();
    expect(data.incoming.map((i) => i.from).sort()).toEqual(parties.map((p) => p.key).sort());
  });

  it('applies concurrent updates of different kinds on one store, none lost', async () => {
    const store = new PairingStore(file);
    const ops: Array<Promise<unknown>> = [];
    for (let i = 0; i < 20; i++) {
      ops.push(store.update((data) => planRequest(data, request(`to-${i}`, msgId(1000 + i)))));
      ops.push(store.update((data) => admitRequest(data, incoming({ key: `from-${i}`, fingerprint: `fp-${i}` }, msgId(2000 + i)), T0)));
      ops.push(store.read());
    }
    await Promise.all(ops);
    const data = await store.read();
    expect(data.outgoing).toHaveLength(20);
    expect(data.control).toHaveLength(20);
    expect(data.incoming).toHaveLength(20);
  });

  it('applies updates racing from several processes, none lost', async () => {
    const script = await writeScript(dir.path, 'admit.mjs', [
      `import { PairingStore } from ${JSON.stringify(join(DIST, 'pairing/store.js'))};`,
      `import { admitRequest } from ${JSON.stringify(join(DIST, 'pairing/rules.js'))};`,
      ...startLine,
      `const [file, writer] = process.argv.slice(2);`,
      `const store = new PairingStore(file);`,
      `const outcomes = [];`,
      `for (let i = 0; i < 5; i++) {`,
      `  const from = 'w' + writer + '-' + i;`,
      `  const request = { request_id: from, from, fingerprint: 'fp-' + from, claimed_name: 'n', session: 's', received_at: ${T0}, code: 'c', ts: ${T0} };`,
      `  outcomes.push(await store.update((data) => admitRequest(data, request, ${T0})));`,
      `}`,
      `process.stdout.write(JSON.stringify(outcomes));`,
    ]);
    const outputs = await raceChildren(script, (i) => [file, String(i)], 4);
    for (const output of outputs) expect(JSON.parse(output)).toEqual(Array(5).fill('stored'));
    const data = await new PairingStore(file).read();
    expect(data.incoming.map((i) => i.from).sort()).toEqual(Array.from({ length: 20 }, (_, k) => `w${Math.floor(k / 5)}-${k % 5}`).sort());
  });
});
