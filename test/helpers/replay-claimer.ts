/**
 * A child process that claims messages in one replay index for one session and prints
 * each outcome on stdout only after `claim()` resolved (so every line is durable).
 *
 * argv: <index path> <session> <count>: claims msg_ids 0 … count−1 from one fixed sender,
 * one after the other (several claimers race each other, not themselves).
 */
import { ReplayIndex } from '../../src/replay/claims.js';
import { newIdentity } from './fixtures.js';

const [path, session, countText] = process.argv.slice(2);
if (path === undefined || session === undefined || countText === undefined) {
  process.stderr.write('usage: replay-claimer <path> <session> <count>\n');
  process.exit(64);
}
const sender = newIdentity(7);
const index = await ReplayIndex.open(path);
const now = Date.now();
for (let i = 0; i < Number(countText); i++) {
  const msgId = i.toString(16).padStart(32, '0');
  const outcome = await index.claim({ from: sender.key, msg_id: msgId, ts: now, session });
  process.stdout.write(`${msgId} ${outcome.outcome}${outcome.outcome === 'taken' ? ` ${outcome.session}` : ''}\n`);
}
await index.close();
