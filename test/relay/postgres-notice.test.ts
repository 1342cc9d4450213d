/**
 * The notices relays of one PostgreSQL database send each other (src/relay/postgres/notice.ts):
 * what one relay writes, another reads back exactly; a route's messages come all or not at
 * all; and nothing unsigned by the relays' shared key is ever taken for a message.
 */
import { createHmac, randomBytes } from 'node:crypto';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { formatNotices, NOTICE_BYTES, parseNotice, type NoticedMessage, type NoticeNews } from '../../src/relay/postgres/notice.js';

const KEY = randomBytes(32);
const FROM = 'AbCdEfGhIjKl';

/** Payloads as a hostile or unlucky sender could make them: lines that look like notice lines, any Unicode. */
const payload = fc.oneof(
  fc.string({ unit: 'grapheme', maxLength: 300 }),
  fc.constantFrom('{"a":1}', '\nq someone#else\nm - 1 3\nabc', '\nr x#y', '', 'x'.repeat(5_000), '\u00e9\u{1F600}\n'),
);

const news = fc
  .uniqueArray(fc.stringMatching(/^[A-Za-z0-9_-]{3,43}#[a-z0-9-]{1,12}$/), { minLength: 0, maxLength: 6 })
  .chain((routes) =>
    fc.record({
      queues: fc.tuple(
        ...routes.map((route) =>
          fc.uniqueArray(fc.integer({ min: 1, max: 1e12 }), { minLength: 1, maxLength: 4 }).chain((ids) =>
            fc.tuple(...ids.map((id) => fc.record({ route: fc.constant(route), follows: fc.option(fc.integer({ min: 1, max: 1e12 }), { nil: null }), id: fc.constant(id), payload }))),
          ),
        ),
      ),
      roster: fc.uniqueArray(fc.stringMatching(/^[A-Za-z0-9_-]{3,43}#[a-z0-9-]{1,12}$/), { maxLength: 3 }),
    }).map(({ queues, roster }): NoticeNews => ({ queues: new Map(routes.map((route, i) => [route, queues[i]!])), roster: new Set(roster) })),
  );

function readAll(notices: readonly string[], key = KEY) {
  const parsed = notices.map((n) => parseNotice(n, key)!);
  return {
    queues: parsed.flatMap((p) => p.queues),
    messages: parsed.flatMap((p) => p.messages),
    roster: parsed.flatMap((p) => p.roster),
  };
}

describe('relay notices on PostgreSQL', () => {
  it('read back what they were written with: every route once, its messages all in id order or none, each notice within NOTIFY’s bound', () => {
    fc.assert(
      fc.property(news, (told) => {
        const notices = formatNotices(FROM, KEY, told);
        for (const notice of notices) expect(Buffer.byteLength(notice)).toBeLessThanOrEqual(NOTICE_BYTES);
        const read = readAll(notices);
        expect(read.roster.sort()).toEqual([...told.roster].sort());
        const carriedRoutes = new Set(read.messages.map((m) => m.route));
        expect([...read.queues, ...carriedRoutes].sort()).toEqual([...told.queues.keys()].sort());
        for (const [route, messages] of told.queues) {
          const got = read.messages.filter((m) => m.route === route);
          if (got.length > 0) expect(got).toEqual([...messages].sort((a, b) => a.id - b.id));
        }
      }),
      { numRuns: 300, seed: 17 },
    );
  });

  it('carry a small message, and leave a route whose messages do not fit to a read', () => {
    const small: NoticedMessage = { route: 'k#s', follows: null, id: 7, payload: '{"v":4}' };
    const big: NoticedMessage = { route: 'k#big', follows: 3, id: 9, payload: 'y'.repeat(NOTICE_BYTES) };
    const read = readAll(formatNotices(FROM, KEY, { queues: new Map([['k#s', [small]], ['k#big', [big]]]), roster: new Set() }));
    expect(read.messages).toEqual([small]);
    expect(read.queues).toEqual(['k#big']);
  });

  it('take no message from a notice without the shared key’s tag: forged, tampered with, cut short, or from a relay of the previous release', () => {
    const message: NoticedMessage = { route: 'k#s', follows: 5, id: 6, payload: '{"v":4,"sealed":"abc"}' };
    const [notice] = formatNotices(FROM, KEY, { queues: new Map([['k#s', [message]]]), roster: new Set(['k#r']) });
    expect(parseNotice(notice!, KEY)!.messages).toEqual([message]);
    const asRead = { from: FROM, queues: ['k#s'], messages: [], roster: ['k#r'] };
    // Another key (another database's relays, or anyone who can NOTIFY).
    expect(parseNotice(notice!, randomBytes(32))).toEqual(asRead);
    // One payload character changed.
    expect(parseNotice(notice!.replace('abc', 'abd'), KEY)).toEqual(asRead);
    // Cut short at every length: never a message, never a payload that was not sent.
    for (let cut = 1; cut < notice!.length; cut++) {
      const read = parseNotice(notice!.slice(0, cut), KEY);
      expect(read?.messages ?? []).toEqual([]);
    }
    // The previous release's notices: q and r lines, no tag.
    expect(parseNotice(`${FROM}\nq k#s\nr k#r`, KEY)).toEqual(asRead);
    expect(parseNotice('', KEY)).toBeUndefined();
  });

  it('under a good tag, read a message line that does not parse, or runs past the end, as a route to read', () => {
    const tagged = (body: string) => `${FROM}\nt ${createHmac('sha256', KEY).update(body).digest('hex')}${body}`;
    expect(parseNotice(tagged('\nq a#b\nm - 1 99\n{}'), KEY)).toEqual({ from: FROM, queues: ['a#b'], messages: [], roster: [] });
    expect(parseNotice(tagged('\nq a#b\nm x 1 2\n{}\nq c#d\nm - 2 2\n{}'), KEY)).toEqual({ from: FROM, queues: ['a#b', 'c#d'], messages: [], roster: [] });
    expect(parseNotice(tagged('\nm - 1 2\n{}'), KEY)).toEqual({ from: FROM, queues: [], messages: [], roster: [] });
    expect(parseNotice(tagged('\nq a#b\nm - 1 2\n{}\nq c#d\nm - 2 3\n{}'), KEY)!.messages).toEqual([{ route: 'a#b', follows: null, id: 1, payload: '{}' }]);
  });
});
