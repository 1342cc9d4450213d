/**
 * A child process that appends notices to one session's inbox, as the MCP server's
 * notifier would, and prints each one's text only after `appendInboxRecord` resolved.
 *
 * argv: <state dir> <session> <count> <label>
 */
import { appendInboxRecord } from '../../src/hosts/claude/inbox.js';

const [state, session, countText, label] = process.argv.slice(2);
if (state === undefined || session === undefined || countText === undefined || label === undefined) {
  process.stderr.write('usage: listener-writer <state dir> <session> <count> <label>\n');
  process.exit(64);
}
for (let i = 0; i < Number(countText); i++) {
  const text = `${label}-${i} ${'x'.repeat(i % 7 === 0 ? 9000 : 40)}`;
  await appendInboxRecord(state, session, { v: 1, kind: 'notice', notification_id: `${label}-${i}`, session, count: 1, at: Date.now(), text });
  process.stdout.write(`${label}-${i}\n`);
}
process.stdout.write('done\n');
