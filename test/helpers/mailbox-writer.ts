/**
 * A child process that commits messages to one mailbox and reports each commit on stdout
 * only after `store()` resolved — so every id printed is a promise the mailbox made.
 *
 * argv: <mailbox path> <count> <label> [concurrency] [text bytes]
 */
import { Mailbox } from '../../src/mailbox/mailbox.js';
import { newIdentity, message } from './fixtures.js';

const [path, countText, label, concurrencyText, textBytesText] = process.argv.slice(2);
if (path === undefined || countText === undefined || label === undefined) {
  process.stderr.write('usage: mailbox-writer <path> <count> <label> [concurrency]\n');
  process.exit(64);
}
const count = Number(countText);
const concurrency = Number(concurrencyText ?? '1');
const padding = 'x'.repeat(Number(textBytesText ?? '0'));
// Eight senders in turn: one sender's unread mail is held to a quarter of the mailbox
// (1,024 records, mailbox/rules.ts), and the kill test commits up to 1,800 in all.
const senders = Array.from({ length: 8 }, (_, i) => newIdentity(40 + i));
const receiver = newIdentity(9);
const mailbox = await Mailbox.open(path);

let next = 0;
async function worker(): Promise<void> {
  while (next < count) {
    const i = next++;
    const envelope = message(senders[i % senders.length]!, receiver, { text: `${label}-${i} ${padding}`, ts: Date.now() });
    const result = await mailbox.store(envelope);
    if (result.outcome !== 'stored') throw new Error(`unexpected outcome ${result.outcome}${'reason' in result ? ` (${String(result.reason)})` : ''}`);
    process.stdout.write(`${envelope.msg_id} ${label}-${i}\n`);
  }
}
await Promise.all(Array.from({ length: concurrency }, () => worker()));
process.stdout.write('done\n');
