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
const sender = newIdentity(7);
const receiver = newIdentity(9);
const mailbox = await Mailbox.open(path);

let next = 0;
async function worker(): Promise<void> {
  while (next < count) {
    const i = next++;
    const envelope = message(sender, receiver, { text: `${label}-${i} ${padding}`, ts: Date.now() });
    const result = await mailbox.store(envelope);
    if (result.outcome !== 'stored') throw new Error(`unexpected outcome ${result.outcome}`);
    process.stdout.write(`${envelope.msg_id} ${label}-${i}\n`);
  }
}
await Promise.all(Array.from({ length: concurrency }, () => worker()));
process.stdout.write('done\n');
