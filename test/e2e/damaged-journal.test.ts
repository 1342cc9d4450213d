/**
 * A journal line whose checksum does not match, under a real server: a byte changed in a
 * stored message's text, the line still valid JSON, as a failing disk or a hand edit
 * would leave it. When `serve` starts again it refuses the line on replay: the changed
 * text is never shown, the journal is moved aside with a log line saying which line
 * fails its checksum, and the messages before it are kept (DESIGN.md, "The mailbox on
 * disk"; store/journal-lines.ts). Real serve processes and the lying relay, forwarding
 * honestly.
 */
import { mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { basename, dirname, join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { mailboxPath } from '../../src/config/layout.js';
import { journalPathOf } from '../../src/store/journal.js';
import { LyingRelay } from '../helpers/lying-relay.js';
import { eventually, pair, peerPool, type Peer } from '../helpers/mcp.js';

let root: string;
let relay: LyingRelay;
const pool = peerPool(() => root);

beforeEach(async () => {
  root = await mkdtemp(join(tmpdir(), 'interlink-damaged-journal-'));
  relay = await LyingRelay.start();
});
afterEach(async () => {
  await pool.closeAll();
  await relay.close();
  await rm(root, { recursive: true, force: true });
});

async function texts(p: Peer): Promise<string[]> {
  const inbox = await p.call<{ messages: { text: string }[] }>('receive_messages');
  return inbox.messages.map((m) => m.text);
}

describe("a damaged line in a session's mailbox journal", () => {
  it('is refused when serve replays the journal: the changed text never shows, the journal is moved aside saying which line, the lines before it are kept', async () => {
    const alice = await pool.start('alice', 'a1', relay.url);
    let bob = await pool.start('bob', 'b1', relay.url);
    const { bKey } = await pair(alice, bob);
    await relay.reader(`${bKey}#b1`);
    for (const text of ['first message', 'second message']) {
      const sent = await alice.call<{ msg_id: string }>('send_message', { to: 'bob', session: 'b1', text });
      await eventually(async () => ((await alice.call<{ state: string }>('message_status', { msg_id: sent.msg_id })).state === 'receiver_stored' ? true : undefined));
    }
    expect(await texts(bob)).toEqual(['first message', 'second message']);
    await pool.stop(bob);

    // One byte of the second message's text, in its journal line; the line stays valid JSON.
    const journal = journalPathOf(mailboxPath(bob.state, bKey, 'b1'));
    const before = await readFile(journal, 'utf8');
    expect(before.split('second message').length).toBe(2);
    await writeFile(journal, before.replace('second message', 'secomd message'));

    bob = await pool.start('bob', 'b1', relay.url);
    expect(await texts(bob)).toEqual(['first message']);
    const corrupt = bob
      .stderr()
      .split('\n')
      .filter((line) => line.includes('"store_corrupt"'))
      .map((line) => JSON.parse(line) as { file: string; reason: string; movedTo: string });
    expect(corrupt).toEqual([expect.objectContaining({ file: journal, reason: expect.stringMatching(/^journal line at byte \d+ fails its checksum$/) })]);
    // The damaged journal is kept aside, byte for byte, for a person to look at.
    expect(await readFile(corrupt[0]!.movedTo, 'utf8')).toContain('secomd message');
    expect((await readdir(dirname(journal))).filter((name) => name.startsWith(`${basename(journal)}.corrupt-`))).toEqual([basename(corrupt[0]!.movedTo)]);
    // And the store goes on: new mail is stored after what was kept.
    await alice.call('send_message', { to: 'bob', session: 'b1', text: 'third message' });
    await eventually(async () => ((await texts(bob)).length === 2 ? true : undefined));
    expect(await texts(bob)).toEqual(['first message', 'third message']);
  });
});
