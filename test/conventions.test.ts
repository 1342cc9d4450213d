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

const SRC = fileURLToPath(new URL('../src', import.meta.url));

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
    patterns: [/randomBytes\(16\)/, /randomUUID/],
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
