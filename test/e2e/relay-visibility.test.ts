/**
 * A relay that is not there, as a person meets it: `serve` says so once per outage and
 * once on recovery at the default log level, `status` says why each relay does not
 * answer, every `pair` command fails naming the relays, and `send_message` says how many
 * relays are connected. Real serve, relay and CLI processes; the SDK client.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { eventually, startPeer, type Peer } from '../helpers/mcp.js';
import { person, reapCli } from '../helpers/pairing.js';
import { reapAll } from '../helpers/process.js';
import { freePort, startRelay } from '../helpers/spawn-relay.js';

let root: string;
const peers: Peer[] = [];
const servers: Server[] = [];

beforeEach(async () => {
  root = await mkdtemp(join(tmpdir(), 'interlink-visibility-'));
});
afterEach(async () => {
  await Promise.all(peers.splice(0).map((p) => p.close().catch(() => undefined)));
  await Promise.all(servers.splice(0).map((s) => new Promise((resolve) => s.close(resolve))));
  await reapCli();
  await reapAll();
  await rm(root, { recursive: true, force: true });
});

/** A TCP listener that drops every connection at once (a relay host that resets), counting them. */
async function resetter(): Promise<{ url: string; connections: () => number }> {
  let count = 0;
  const sockets = new Set<Socket>();
  const server = createServer((socket) => {
    count++;
    sockets.add(socket);
    socket.destroy();
  });
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  const port = typeof address === 'object' && address !== null ? address.port : 0;
  return { url: `ws://127.0.0.1:${port}`, connections: () => count };
}

interface LogLine {
  event: string;
  relay?: string;
  error?: string;
  message?: string;
}

function logLines(stderr: string, event: string): LogLine[] {
  return stderr
    .split('\n')
    .filter((line) => line.startsWith('{'))
    .map((line) => JSON.parse(line) as LogLine)
    .filter((line) => line.event === event);
}

interface Receipt {
  msg_id: string;
  state: string;
  relays: { connected: number; configured: number };
  note?: string;
}

describe('serve with relays that do not answer', () => {
  it('logs one line per relay per outage at the default level, one on recovery, and says so in send_message results', async () => {
    const deadPort = await freePort();
    const dead = `ws://127.0.0.1:${deadPort}`;
    const reset = await resetter();
    // INTERLINK_LOG empty: the default level (warnings and errors).
    const alice = await startPeer({ root, name: 'alice', session: 'a1', relays: `${dead},${reset.url}`, env: { INTERLINK_LOG: '' } });
    peers.push(alice);

    // Several attempts have failed on the resetting relay: the outage is still one line each.
    await eventually(async () => (reset.connections() >= 3 && logLines(alice.stderr(), 'relay_unreachable').length >= 2 ? true : undefined), 20_000, 'retries');
    const outages = logLines(alice.stderr(), 'relay_unreachable');
    expect(outages.map((l) => l.relay).sort()).toEqual([dead, reset.url].sort());
    expect(outages.find((l) => l.relay === dead)).toMatchObject({ error: 'connection refused' });
    expect(outages.find((l) => l.relay === reset.url)).toMatchObject({ error: 'connection reset' });
    expect(outages.find((l) => l.relay === dead)?.message).toContain(`relay ${dead} does not answer (connection refused)`);

    const waiting = await alice.call<Receipt>('send_message', { to: 'self', session: 'a2', text: 'while no relay answers' });
    expect(waiting).toMatchObject({ state: 'pending', duplicate: false, relays: { connected: 0, configured: 2 } });
    expect(waiting.note).toContain('outbox');

    // A relay comes up on the dead port: one recovery line, and the message goes out.
    const relay = await startRelay({ port: deadPort });
    await eventually(async () => (logLines(alice.stderr(), 'relay_reachable').length > 0 ? true : undefined), 20_000, 'recovery line');
    // Accepted for a2, a session no roster has: awaiting_session (a view of bus_accepted).
    await eventually(async () => ((await alice.call<{ state: string }>('message_status', { msg_id: waiting.msg_id })).state === 'awaiting_session' ? true : undefined));
    const connected = await alice.call<Receipt>('send_message', { to: 'self', session: 'a2', text: 'with a relay' });
    expect(connected.relays).toEqual({ connected: 1, configured: 2 });
    // No word of the outbox now; a2 is still on no roster, which the note says.
    expect(connected.note).not.toContain('outbox');
    expect(connected.note).toMatch(/session a2, which is on no relay roster/);

    const before = reset.connections();
    await eventually(async () => (reset.connections() > before ? true : undefined), 20_000, 'another retry');
    expect(logLines(alice.stderr(), 'relay_unreachable')).toHaveLength(2);
    expect(logLines(alice.stderr(), 'relay_reachable')).toEqual([expect.objectContaining({ relay: dead, message: `relay ${dead} answers again` })]);
    await relay.child.kill();
  });
});

describe('status with relays that do not answer', () => {
  it('shows each relay and why it does not answer, for people and as JSON', async () => {
    const dead = `ws://127.0.0.1:${await freePort()}`;
    const relay = await startRelay();
    const alice = person(root, 'alice', `${dead},${relay.url}`);
    const human = await alice.cli(['status']);
    expect(human.code, human.stderr).toBe(0);
    expect(human.stdout).toContain(`relay        ${dead}  no answer (connection refused)`);
    expect(human.stdout).toContain(`relay        ${relay.url}  answers`);
    const data = JSON.parse((await alice.cli(['status', '--json'])).stdout) as { relays: unknown };
    expect(data.relays).toEqual([
      { url: dead, answers: false, error: 'connection refused' },
      { url: relay.url, answers: true },
    ]);
  });
});

describe('pair commands when no relay answers', () => {
  it('each exits 1 with one line naming every relay and why, and a request does not blame the name', async () => {
    const dead1 = `ws://127.0.0.1:${await freePort()}`;
    const dead2 = `ws://127.0.0.1:${await freePort()}`;
    const bob = person(root, 'bob', `${dead1},${dead2}`);
    const fingerprint = '0123-4567-89ab-cdef';
    for (const args of [['pair', 'list'], ['pair', 'request', 'alice'], ['pair', 'accept', fingerprint], ['pair', 'reject', fingerprint], ['pair', 'list', '--json']]) {
      const run = await bob.cli(args);
      expect(run.code, `${args.join(' ')}: ${run.stderr}`).toBe(1);
      // With --json the error is also the one JSON document on stdout.
      if (args.includes('--json')) expect(JSON.parse(run.stdout)).toEqual({ error: { code: 'relay_unreachable', message: expect.stringContaining('no relay answered') } });
      else expect(run.stdout, args.join(' ')).toBe('');
      const lines = run.stderr.trimEnd().split('\n');
      expect(lines, run.stderr).toHaveLength(1);
      expect(lines[0]).toBe(
        `interlink-mcp pair: no relay answered: ${dead1} (connection refused), ${dead2} (connection refused). ` +
          'Is the relay running? Start one with `interlink-mcp relay`, or set INTERLINK_URL to one that runs. Nothing was done.',
      );
    }
  });

  it('works with the relays that answer and names the one that did not', async () => {
    const dead = `ws://127.0.0.1:${await freePort()}`;
    const relay = await startRelay();
    const bob = person(root, 'bob', `${dead},${relay.url}`);
    const run = await bob.cli(['pair', 'list']);
    expect(run.code, run.stderr).toBe(0);
    expect(run.stdout).toContain('No incoming pairing requests.');
    expect(run.stderr).toBe(`interlink-mcp pair: working with the relays that answered; no answer from ${dead} (connection refused)\n`);
  });
});
