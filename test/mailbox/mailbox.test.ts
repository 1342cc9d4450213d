/** The mailbox on real files: persistence, consumption rules, the journal and damage. */
import { appendFile, mkdir, readFile, readdir, rm, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { isInterlinkError } from '../../src/errors.js';
import { journalPathOf } from '../../src/store/journal.js';
import { Mailbox } from '../../src/mailbox/mailbox.js';
import { currentState } from '../../src/mailbox/record-state.js';
import { message, newIdentity, tempDir } from '../helpers/fixtures.js';

const alice = newIdentity(11);
const bob = newIdentity(12);

let dir: { path: string; remove: () => Promise<void> };
let path: string;

beforeEach(async () => {
  dir = await tempDir();
  path = join(dir.path, 'mailbox', bob.key, 'main.json');
});
afterEach(() => dir.remove());

const receipt = (e: { from: string; msg_id: string }) => ({ sender: e.from, msg_id: e.msg_id });

describe('mailbox', () => {
  it('keeps what it stored across reopening, and fetch consumes nothing', async () => {
    const mailbox = await Mailbox.open(path);
    const m1 = message(alice, bob, { text: 'one' });
    const m2 = message(alice, bob, { text: 'two' });
    expect((await mailbox.store(m1, { peer: 'alice' })).outcome).toBe('stored');
    expect((await mailbox.store(m2)).outcome).toBe('stored');

    const reopened = await Mailbox.open(path);
    for (let i = 0; i < 2; i++) {
      const { messages, more } = await reopened.fetch();
      expect(messages.map((m) => m.envelope.text)).toEqual(['one', 'two']);
      expect(messages[0]!.peer).toBe('alice');
      expect(more).toBe(false);
    }
  });

  it('acknowledges idempotently and the acknowledgement survives reopening', async () => {
    const mailbox = await Mailbox.open(path);
    const m = message(alice, bob);
    await mailbox.store(m);
    expect(await mailbox.acknowledge([receipt(m)])).toEqual({ acknowledged: 1, already_acknowledged: 0, unknown: 0 });
    expect(await mailbox.acknowledge([receipt(m)])).toEqual({ acknowledged: 0, already_acknowledged: 1, unknown: 0 });
    const reopened = await Mailbox.open(path);
    expect((await reopened.fetch()).messages).toEqual([]);
    const record = await reopened.get(m.from, m.msg_id);
    expect(record && currentState(record)).toBe('receiver_acknowledged');
    expect(await reopened.acknowledge([{ sender: alice.key, msg_id: '0'.repeat(32) }])).toEqual({ acknowledged: 0, already_acknowledged: 0, unknown: 1 });
  });

  it('refuses a duplicate (sender, msg_id), also after reopening', async () => {
    const m = message(alice, bob);
    await (await Mailbox.open(path)).store(m);
    expect((await (await Mailbox.open(path)).store(m)).outcome).toBe('duplicate');
  });

  it('pages fetches with `more`, bounded at 100', async () => {
    const mailbox = await Mailbox.open(path);
    await Promise.all(Array.from({ length: 120 }, (_, i) => mailbox.store(message(alice, bob, { text: `m${i}` }))));
    expect((await mailbox.fetch()).messages).toHaveLength(20);
    const big = await mailbox.fetch(500);
    expect(big.messages).toHaveLength(100);
    expect(big.more).toBe(true);
    await mailbox.acknowledge(big.messages.map((m) => receipt(m.envelope)));
    const rest = await mailbox.fetch(100);
    expect(rest.messages).toHaveLength(20);
    expect(rest.more).toBe(false);
  });

  it('history is read-only by default and consumes exactly what it returns', async () => {
    const mailbox = await Mailbox.open(path);
    const sent = [];
    for (let i = 0; i < 5; i++) {
      const m = message(alice, bob, { text: `h${i}` });
      sent.push(m);
      await mailbox.store(m);
    }
    const carol = newIdentity(13);
    await mailbox.store(message(carol, bob, { text: 'from carol' }));
    const peek = await mailbox.history(alice.key, { limit: 3 });
    expect(peek.map((r) => r.envelope.text)).toEqual(['h2', 'h3', 'h4']);
    expect((await mailbox.stats()).unread).toBe(6);
    const consumed = await mailbox.history(alice.key, { limit: 2, consume: true });
    expect(consumed.map((r) => [r.envelope.text, currentState(r)])).toEqual([
      ['h3', 'receiver_acknowledged'],
      ['h4', 'receiver_acknowledged'],
    ]);
    const unread = (await mailbox.fetch()).messages.map((r) => r.envelope.text);
    expect(unread).toEqual(['h0', 'h1', 'h2', 'from carol']);
  });

  it('sees what another process (another Mailbox instance) committed', async () => {
    const a = await Mailbox.open(path);
    const b = await Mailbox.open(path);
    const m = message(alice, bob);
    await a.store(m);
    expect((await b.fetch()).messages).toHaveLength(1);
    await b.acknowledge([receipt(m)]);
    expect((await a.fetch()).messages).toHaveLength(0);
    expect((await a.store(m)).outcome).toBe('duplicate');
  });

  it('compacts the journal into a new snapshot generation without losing anything', async () => {
    const mailbox = await Mailbox.open(path);
    const text = 'x'.repeat(8 * 1024);
    const all = await Promise.all(Array.from({ length: 200 }, (_, i) => mailbox.store(message(alice, bob, { text: `${i} ${text}` }))));
    expect(all.every((r) => r.outcome === 'stored')).toBe(true);
    const snapshot = JSON.parse(await readFile(path, 'utf8')) as { generation: number; records: unknown[] };
    expect(snapshot.generation).toBeGreaterThan(0);
    const journal = await stat(journalPathOf(path));
    expect(journal.size).toBeLessThan(1024 * 1024 + 64 * 1024);
    const reopened = await Mailbox.open(path, { readOnly: true });
    expect((await reopened.stats()).unread).toBe(200);
  });

  it('cuts a torn final journal line (a crash mid-append) and keeps every complete commit', async () => {
    const mailbox = await Mailbox.open(path);
    const kept = message(alice, bob, { text: 'kept' });
    await mailbox.store(kept);
    await appendFile(journalPathOf(path), '{"op":"store","at":1,"envelope":{"fro');
    const reopened = await Mailbox.open(path);
    expect((await reopened.fetch()).messages.map((m) => m.envelope.text)).toEqual(['kept']);
    expect(reopened.recoveries).toEqual([]);
    await reopened.store(message(alice, bob, { text: 'after' }));
    const again = await Mailbox.open(path, { readOnly: true });
    expect((await again.fetch()).messages.map((m) => m.envelope.text)).toEqual(['kept', 'after']);
  });

  it('moves a damaged journal aside, keeps its valid prefix, and reports it', async () => {
    const mailbox = await Mailbox.open(path);
    await mailbox.store(message(alice, bob, { text: 'before' }));
    await appendFile(journalPathOf(path), 'this is not json\n');
    const reopened = await Mailbox.open(path);
    expect(reopened.recoveries).toHaveLength(1);
    expect(reopened.recoveries[0]!.movedTo).toMatch(/\.journal\.corrupt-/);
    expect((await reopened.fetch()).messages.map((m) => m.envelope.text)).toEqual(['before']);
    await reopened.store(message(alice, bob, { text: 'after' }));
    const files = await readdir(join(dir.path, 'mailbox', bob.key));
    expect(files.some((f) => f.includes('.corrupt-'))).toBe(true);
    expect((await (await Mailbox.open(path)).fetch()).messages.map((m) => m.envelope.text)).toEqual(['before', 'after']);
  });

  it('detects a flipped byte that leaves a valid line: reported, never applied', async () => {
    const mailbox = await Mailbox.open(path);
    await mailbox.store(message(alice, bob, { text: 'first' }));
    await mailbox.store(message(alice, bob, { text: 'pay alice 10' }));
    const journal = await readFile(journalPathOf(path), 'utf8');
    expect(journal).toContain('pay alice 10');
    // Still JSON, still a valid op: only the checksum tells.
    await writeFile(journalPathOf(path), journal.replace('pay alice 10', 'pay alice 90'));
    const reopened = await Mailbox.open(path);
    expect(reopened.recoveries).toHaveLength(1);
    expect(reopened.recoveries[0]!.reason).toMatch(/fails its checksum/);
    expect((await reopened.fetch()).messages.map((m) => m.envelope.text)).toEqual(['first']);
  });

  it('reads a journal written before line checksums, and rewrites it checked', async () => {
    const mailbox = await Mailbox.open(path);
    await mailbox.store(message(alice, bob, { text: 'old format' }));
    await mailbox.close();
    const lines = (await readFile(journalPathOf(path), 'utf8')).split('\n').filter((l) => l !== '');
    const header = JSON.parse(lines[0]!) as Record<string, unknown>;
    delete header.line_check;
    const legacy = [JSON.stringify(header), ...lines.slice(1).map((l) => l.slice(l.indexOf(' ') + 1))].join('\n') + '\n';
    await writeFile(journalPathOf(path), legacy);
    const readOnly = await Mailbox.open(path, { readOnly: true });
    expect((await readOnly.fetch()).messages.map((m) => m.envelope.text)).toEqual(['old format']);
    const writer = await Mailbox.open(path);
    expect(writer.recoveries).toEqual([]);
    await writer.store(message(alice, bob, { text: 'new format' }));
    expect(await readFile(journalPathOf(path), 'utf8')).toContain('"line_check"');
    expect((await (await Mailbox.open(path, { readOnly: true })).fetch()).messages.map((m) => m.envelope.text)).toEqual(['old format', 'new format']);
  });

  it('reads a line without a checksum that an older version appended during an upgrade', async () => {
    const mailbox = await Mailbox.open(path);
    await mailbox.store(message(alice, bob, { text: 'new version' }));
    await mailbox.close();
    const journal = await readFile(journalPathOf(path), 'utf8');
    const checkedLine = journal.trimEnd().split('\n').at(-1)!;
    const older = JSON.parse(checkedLine.slice(checkedLine.indexOf(' ') + 1)) as { envelope: unknown };
    const legacy = { ...older, envelope: message(alice, bob, { text: 'old version' }) };
    await appendFile(journalPathOf(path), JSON.stringify(legacy) + '\n');
    const reopened = await Mailbox.open(path);
    expect(reopened.recoveries).toEqual([]);
    expect((await reopened.fetch()).messages.map((m) => m.envelope.text)).toEqual(['new version', 'old version']);
  });

  it('moves a damaged snapshot aside and salvages the journal written after it', async () => {
    const mailbox = await Mailbox.open(path);
    await writeFile(path, '{"format":"interlink-mailbox", broken');
    await mailbox.store(message(alice, bob, { text: 'journaled' }));
    const reopened = await Mailbox.open(path);
    expect(reopened.recoveries.map((r) => r.reason)).toEqual(['snapshot is not JSON']);
    expect((await reopened.fetch()).messages.map((m) => m.envelope.text)).toEqual(['journaled']);
    // and the next start is clean: no crash loop.
    expect((await Mailbox.open(path)).recoveries).toEqual([]);
  });

  it('a read-only view changes nothing, even when it finds damage', async () => {
    const mailbox = await Mailbox.open(path);
    await mailbox.store(message(alice, bob, { text: 'one' }));
    await appendFile(journalPathOf(path), 'garbage\n');
    const before = await readFile(journalPathOf(path));
    const view = await Mailbox.open(path, { readOnly: true });
    expect((await view.fetch()).messages).toHaveLength(1);
    await expect(view.acknowledge([{ sender: alice.key, msg_id: '0'.repeat(32) }])).rejects.toThrow(/read-only/);
    expect(await readFile(journalPathOf(path))).toEqual(before);
  });

  it('reports a full mailbox without evicting unread mail', async () => {
    const mailbox = await Mailbox.open(path, { limits: { maxRecords: 2, maxBytes: 1 << 20, senderRecords: 3 } });
    await mailbox.store(message(alice, bob));
    await mailbox.store(message(alice, bob));
    expect(await mailbox.store(message(alice, bob))).toEqual({ outcome: 'full', reason: 'records', sender: alice.key, noted: true });
    expect((await mailbox.stats()).unread).toBe(2);
  });

  it('fails a commit it cannot write with a storage error, then recovers once it can', async () => {
    const mailbox = await Mailbox.open(path);
    await mailbox.store(message(alice, bob, { text: 'first' }));
    const journal = journalPathOf(path);
    const saved = await readFile(journal);
    await rm(journal);
    await mkdir(journal);
    const error = await mailbox.store(message(alice, bob, { text: 'refused' })).catch((err: unknown) => err);
    expect(isInterlinkError(error, 'storage')).toBe(true);
    await rm(journal, { recursive: true });
    await writeFile(journal, saved);
    expect((await mailbox.store(message(alice, bob, { text: 'second' }))).outcome).toBe('stored');
    expect((await mailbox.fetch()).messages.map((m) => m.envelope.text)).toEqual(['first', 'second']);
  });

  it('rejects a path-like session id before touching the disk', async () => {
    const { mailboxPath } = await import('../../src/config/layout.js');
    for (const bad of ['../x', 'a/b', 'a\\b', 'x\0y', '', 'a'.repeat(129)]) {
      let error: unknown;
      try {
        mailboxPath(dir.path, bob.key, bad);
      } catch (err) {
        error = err;
      }
      expect(isInterlinkError(error, 'bad_name')).toBe(true);
    }
  });
});
