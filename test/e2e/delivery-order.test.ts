/**
 * A session stores a relay's deliveries in the order the relay sent them (DESIGN.md, "The
 * agent: one session, running": inbound judges deliveries concurrently but commits them
 * in the relay's order), so a person reading while mail streams in from several peers
 * sees it in the order it came. Under a real `serve`, deliveries that take unequal time
 * to admit: a version 2 message of a clear peer (the Rust Interlink's kind) is claimed in
 * the identity's replay index, a commit of its own, before its mailbox commit; a sealed
 * version 4 message of another peer is not. The lying relay sends them interleaved, in
 * one burst, and the mailbox must hold them in that order across senders (within a
 * sender, the order it signed them is kept in any case).
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { wireOf, type Envelope } from '../../src/envelope/envelope.js';
import { signEnvelope } from '../../src/envelope/sign.js';
import { runCli, userEnv } from '../helpers/cli.js';
import { newIdentity } from '../helpers/fixtures.js';
import { LyingRelay } from '../helpers/lying-relay.js';
import { eventually, peerPool } from '../helpers/mcp.js';

let root: string;
let relay: LyingRelay;
const pool = peerPool(() => root);

beforeEach(async () => {
  root = await mkdtemp(join(tmpdir(), 'interlink-delivery-order-'));
  relay = await LyingRelay.start();
});
afterEach(async () => {
  await pool.closeAll();
  await relay.close();
  await rm(root, { recursive: true, force: true });
});

describe("a relay's deliveries", () => {
  it('are stored in the order the relay sent them, across senders, when the earlier ones take longer to admit', async () => {
    const bob = await pool.start('bob', 'b1', relay.url);
    const bKey = (await bob.call<{ identity: string }>('get_my_session_id')).identity;
    const rusty = newIdentity(91);
    const alice = newIdentity(92);
    const dirs = { root, configDir: bob.config, stateDir: bob.state };
    for (const [name, key, flags] of [['rusty', rusty.key, ['--clear']], ['alice', alice.key, []]] as const) {
      const run = await runCli(['peers', 'add', name, key, ...flags], userEnv(dirs));
      expect(run.code, run.stderr).toBe(0);
    }
    await relay.reader(`${bKey}#b1`);

    // rusty's (version 2, claimed first) and alice's (version 4), taking turns.
    const now = Date.now();
    const sent: Envelope[] = [];
    for (let i = 0; i < 4; i++) {
      sent.push(signEnvelope(rusty.signingKey, { to: bKey, text: `rusty ${i}`, ts: now + i }));
      sent.push(signEnvelope(alice.signingKey, { to: bKey, to_session: 'b1', text: `alice ${i}`, ts: now + i }));
    }
    const ids = sent.map((envelope) => relay.push(`${bKey}#b1`, wireOf(envelope) as unknown as Record<string, unknown>));
    await eventually(async () => (ids.every((id) => relay.acknowledged(`${bKey}#b1`, id)) ? true : undefined), 15_000, 'every delivery acknowledged');

    const inbox = await bob.call<{ messages: { text: string }[] }>('receive_messages');
    expect(inbox.messages.map((m) => m.text)).toEqual(sent.map((e) => e.text));
    expect(bob.stderr()).not.toContain('"inbound_rejected"');
  });
});
