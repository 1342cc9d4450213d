/**
 * Text others wrote never reaches a person's terminal raw: `inbox` shows escape, bell,
 * C1 and bidi characters of a peer's message as visible escapes (src/cli/printable.ts).
 */
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { forTerminal } from '../../src/cli/printable.js';
import { mailboxPath } from '../../src/config/layout.js';
import { loadOrCreateIdentity } from '../../src/identity/identity.js';
import { Mailbox } from '../../src/mailbox/mailbox.js';
import { addPeer } from '../../src/peers/peers.js';
import { expectSuccess, runCli, userEnv, type UserDirs } from '../helpers/cli.js';
import { message, newIdentity, tempDir } from '../helpers/fixtures.js';

const HOSTILE = 'ok\u001b[2J\u001b]0;pwned\u0007 \u0085 \u202eexe.txt\u202c line\nnext\tcol';

describe('forTerminal', () => {
  it('shows control, escape and bidi characters as escapes, and keeps newlines and tabs', () => {
    expect(forTerminal(HOSTILE)).toBe('ok\\u{1b}[2J\\u{1b}]0;pwned\\u{7} \\u{85} \\u{202e}exe.txt\\u{202c} line\nnext\tcol');
    expect(forTerminal('plain text, ünïcode ✓')).toBe('plain text, ünïcode ✓');
  });
});

describe('inbox', () => {
  let dir: { path: string; remove: () => Promise<void> };
  let dirs: UserDirs;
  beforeEach(async () => {
    dir = await tempDir();
    dirs = { root: dir.path, configDir: join(dir.path, 'config'), stateDir: join(dir.path, 'state') };
  });
  afterEach(() => dir.remove());

  it("prints a peer's escape sequences as visible text, never raw", async () => {
    const me = await loadOrCreateIdentity(join(dirs.configDir, 'id.key'));
    const peer = newIdentity();
    await addPeer(join(dirs.configDir, 'peers.json'), 'pat', peer.key);
    const mailbox = await Mailbox.open(mailboxPath(dirs.stateDir, me.key, 's1'));
    await mailbox.store(message(peer, me, { text: HOSTILE }));
    await mailbox.close();
    const out = expectSuccess(await runCli(['inbox'], userEnv(dirs)));
    expect(out).not.toMatch(/[\u001b\u0007\u0085\u202e]/);
    expect(out).toContain('ok\\u{1b}[2J');
    // --json is data: the same text, exactly.
    const json = JSON.parse(expectSuccess(await runCli(['inbox', '--json'], userEnv(dirs)))) as { messages: { text: string }[] };
    expect(json.messages[0]!.text).toBe(HOSTILE);
  });
});
