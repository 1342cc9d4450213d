/**
 * A self-contained walk through the core path, in a temporary directory: two paired
 * identities, a signed message, the trust gate, a durable mailbox commit, a fetch that
 * consumes nothing, and an idempotent acknowledgement. A stranger is turned away.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { mailboxPath } from '../../config/paths.js';
import { signEnvelope, type Envelope } from '../../envelope/envelope.js';
import { decide } from '../../gate/decide.js';
import { generateSigningKey } from '../../identity/ed25519.js';
import { identityFromSigningKey, type Identity } from '../../identity/identity.js';
import { Mailbox } from '../../mailbox/mailbox.js';
import { currentState } from '../../mailbox/state.js';
import { addPeer, loadPeers } from '../../peers/peers.js';
import { expectPositionals, parse } from '../args.js';

export const demoHelp = `usage: interlink-mcp demo

Runs two paired identities in a temporary directory and prints each step of a message:
signed, admitted by the trust gate, stored in the receiver's mailbox, fetched (twice,
nothing consumed) and acknowledged (twice, idempotent). Leaves nothing behind.`;

function step(text: string): void {
  process.stdout.write(text + '\n');
}

async function admitInto(mailbox: Mailbox, me: Identity, peersFile: string, envelope: Envelope): Promise<string> {
  const { table } = await loadPeers(peersFile);
  const peers = new Map(table.peers.map((p) => [p.key, p.petname]));
  const seen = await mailbox.has(envelope.from, envelope.msg_id);
  const verdict = decide(envelope, { me: me.key, peers, outstandingRequests: [], now: Date.now(), seen: () => seen });
  if (!verdict.ok) return `rejected by the gate: ${verdict.code} (${verdict.reason})`;
  const stored = await mailbox.store(envelope, verdict.petname !== undefined ? { peer: verdict.petname } : {});
  return stored.outcome === 'stored' ? `admitted (${verdict.admission}) and ${currentState(stored.record)}` : stored.outcome;
}

export async function demo(argv: readonly string[]): Promise<void> {
  expectPositionals(parse(argv, {}), 0, 'interlink-mcp demo');
  const root = await mkdtemp(join(tmpdir(), 'interlink-demo-'));
  try {
    const alice = identityFromSigningKey(generateSigningKey());
    const bob = identityFromSigningKey(generateSigningKey());
    const mallory = identityFromSigningKey(generateSigningKey());
    step(`alice  ${alice.fingerprint}`);
    step(`bob    ${bob.fingerprint}`);

    const bobPeers = join(root, 'bob-peers.json');
    await addPeer(bobPeers, 'alice', alice.key);
    step('bob adds alice to his peers');

    const mailbox = await Mailbox.open(mailboxPath(join(root, 'state'), bob.key, 'main'));
    const message = signEnvelope(alice.signingKey, { to: bob.key, text: 'Can you review PR 42?', task_id: 'review-42', status: 'needs_input' });
    step(`alice signs ${message.msg_id}: ${JSON.stringify(message.text)}`);
    step(`  ${await admitInto(mailbox, bob, bobPeers, message)}`);
    step(`  again (a relay redelivers): ${await admitInto(mailbox, bob, bobPeers, message)}`);

    const knock = signEnvelope(mallory.signingKey, { to: bob.key, text: 'run this for me' });
    step(`mallory (not a peer) signs ${knock.msg_id}`);
    step(`  ${await admitInto(mailbox, bob, bobPeers, knock)}`);

    for (const attempt of ['first', 'second']) {
      const { messages } = await mailbox.fetch();
      step(`bob fetches (${attempt} time): ${messages.length} unread, nothing consumed`);
    }
    const receipt = { sender: message.from, msg_id: message.msg_id };
    for (const attempt of ['first', 'second']) {
      const counts = await mailbox.acknowledge([receipt]);
      step(`bob acknowledges (${attempt} time): ${JSON.stringify(counts)}`);
    }
    const record = await mailbox.get(message.from, message.msg_id);
    step(`state of ${message.msg_id}: ${record?.states.map((s) => s.state).join(' -> ')}`);
    const { messages } = await mailbox.fetch();
    step(`bob fetches again: ${messages.length} unread`);
  } finally {
    await rm(root, { recursive: true, force: true });
  }
}
