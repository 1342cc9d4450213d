/**
 * One place per convention (DESIGN.md, "Architecture"): routes are built in
 * envelope/route.ts, receipt keys in envelope/receipt.ts, paths under the state and
 * config roots in config/layout.ts, message ids in envelope/envelope.ts; the notice size
 * limit and the reservation type are declared once. Each rule is checked against src/
 * and against its own module, so a pattern that stopped matching anything would fail
 * here instead of passing quietly.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { MAX_NAME_BYTES } from '../../src/config/paths.js';
import { MAX_TASK_ID_BYTES } from '../../src/envelope/envelope.js';
import { formatRoute, parseRoute } from '../../src/envelope/route.js';
import { MESSAGE_TOOLS } from '../../src/mcp/tools/messages.js';
import { PEER_TOOLS } from '../../src/mcp/tools/peers.js';
import { MAX_FIELD_BYTES } from '../../src/presence/announcement.js';
import { newIdentity } from '../helpers/fixtures.js';

const SRC = fileURLToPath(new URL('../../src', import.meta.url));

const sources: { file: string; lines: string[] }[] = readdirSync(SRC, { recursive: true, encoding: 'utf8' })
  .filter((name) => name.endsWith('.ts'))
  .map((name) => ({ file: relative(SRC, join(SRC, name)).split('\\').join('/'), lines: readFileSync(join(SRC, name), 'utf8').split('\n') }));

/** `file:line` of every line matching one of `patterns`. */
function matches(patterns: readonly RegExp[]): string[] {
  return sources.flatMap(({ file, lines }) => lines.flatMap((line, i) => (patterns.some((p) => p.test(line)) ? [`${file}:${i + 1}`] : [])));
}

const rules: { convention: string; home: string; patterns: RegExp[] }[] = [
  {
    convention: 'the route separator',
    home: 'envelope/route.ts',
    patterns: [/#\$\{/, /['"`]#['"`]/],
  },
  {
    convention: 'receipt keys',
    home: 'envelope/receipt.ts',
    patterns: [/\.(from|sender)\} \$\{/],
  },
  {
    convention: 'paths under the state and config roots',
    home: 'config/layout.ts',
    patterns: [
      /\bjoin\(\s*(state|stateDir|configDir|config\.stateDir|config\.configDir|options\.stateDir)\b/,
      /\bjoin\([^)]*['"`](mailbox|outbox|inbox|pairing|failed|rejected|replay|id\.key|peers\.json)['"`]/,
      /\$\{session\}\.json/,
    ],
  },
  {
    convention: 'message id generation',
    home: 'envelope/envelope.ts',
    // seal.ts draws its nonces the same way; they are no message ids.
    patterns: [/randomBytes\(16\)/, /randomUUID/, /randomFillSync\((?!nonces\))/],
  },
  {
    convention: 'the notice size limit',
    home: 'notices/notice.ts',
    patterns: [/\b12 \* 1024\b/],
  },
  {
    convention: 'the notice reservation type',
    home: 'mailbox/format.ts',
    patterns: [/interface Reservation\b/, /type Reservation =/],
  },
];

describe('one place per convention', () => {
  for (const { convention, home, patterns } of rules) {
    it(`${convention}: only in ${home}`, () => {
      const found = matches(patterns);
      expect(found.some((at) => at.startsWith(`${home}:`)), `${home} should match`).toBe(true);
      expect(found.filter((at) => !at.startsWith(`${home}:`))).toEqual([]);
    });
  }
});

describe('routes', () => {
  it('parse back to what built them, and only with a full key and a session the name rule allows', () => {
    const key = newIdentity().key;
    expect(parseRoute(formatRoute({ key, session: 'b1' }))).toEqual({ key, session: 'b1' });
    expect(parseRoute(formatRoute({ key, session: 'a#b' }))).toEqual({ key, session: 'a#b' });
    for (const bad of [key, `${key}#`, `${key}#../x`, `${key.slice(1)}#b1`, '#b1']) expect(parseRoute(bad)).toBeUndefined();
  });
});

describe('tool schemas count UTF-8 bytes, as the envelope and announcements do', () => {
  const input = (tools: typeof MESSAGE_TOOLS, name: string) => tools.find((t) => t.name === name)!.input;
  const fits = (bytes: number) => 'x'.repeat(bytes);
  // Two bytes per character: half as many characters as the byte bound allows, plus one.
  const overByBytes = (bytes: number) => 'é'.repeat(bytes / 2 + 1);

  it('task_id: at most MAX_TASK_ID_BYTES bytes', () => {
    const send = input(MESSAGE_TOOLS, 'send_message');
    expect(send.safeParse({ to: 'bob', text: 'hi', task_id: fits(MAX_TASK_ID_BYTES) }).success).toBe(true);
    expect(overByBytes(MAX_TASK_ID_BYTES).length).toBeLessThan(MAX_TASK_ID_BYTES);
    expect(send.safeParse({ to: 'bob', text: 'hi', task_id: overByBytes(MAX_TASK_ID_BYTES) }).success).toBe(false);
  });

  it('summary: at most the announcement field bound in bytes, and may be empty', () => {
    const summary = input(PEER_TOOLS, 'set_summary');
    expect(summary.safeParse({ summary: '' }).success).toBe(true);
    expect(summary.safeParse({ summary: fits(MAX_FIELD_BYTES) }).success).toBe(true);
    expect(summary.safeParse({ summary: overByBytes(MAX_FIELD_BYTES) }).success).toBe(false);
  });

  it('petnames: at most MAX_NAME_BYTES bytes, the name rule', () => {
    const add = input(PEER_TOOLS, 'add_peer');
    expect(add.safeParse({ petname: fits(MAX_NAME_BYTES), key: 'k' }).success).toBe(true);
    expect(add.safeParse({ petname: overByBytes(MAX_NAME_BYTES), key: 'k' }).success).toBe(false);
  });
});
