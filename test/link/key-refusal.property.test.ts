/**
 * The relay-key decision and its one wording (issue 35, point 7), over every small case:
 * a few URLs, each pinning nothing or one of a few keys and with nothing or one of them
 * recorded, and each key presented at each URL. The verdict matches a plain model of
 * DESIGN.md "The relay's key", its reason is typed, and every refusal is one sentence that
 * names the URL; a changed key names both keys and the exact `relay forget` command.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { keyRefusalSentence, keyRefusalText, type KeyRefusal } from '../../src/link/key-refusal.js';
import { decideRelayKey, type RelayRecord } from '../../src/link/known-relays.js';
import { goingOnWithout, noUsableRelay, unreachableList, untrustedNote, type Unanswered } from '../../src/link/reach.js';
import type { RelayEndpoint } from '../../src/config/relay-url.js';
import { freshRelayKey } from '../../src/relay/relay-key.js';

const KEYS = [freshRelayKey().key, freshRelayKey().key, freshRelayKey().key];
const URLS = ['ws://a:1', 'ws://b:2', 'ws://c:3'];
const choice = fc.option(fc.constantFrom(...KEYS), { nil: undefined });

/** The rule in DESIGN.md's words: a pin decides; else another URL's key is refused; else the first key recorded holds. */
function model(endpoint: RelayEndpoint, key: string, listed: readonly RelayEndpoint[], records: Record<string, RelayRecord>): KeyRefusal['reason'] | 'trusted' {
  if (endpoint.pin !== undefined) return endpoint.pin === key ? 'trusted' : 'not_pinned_key';
  const elsewhere = listed.some((o) => o.url !== endpoint.url && (o.pin === key || (o.pin === undefined && records[o.url]?.key === key)));
  if (elsewhere) return 'other_relays_key';
  const recorded = records[endpoint.url]?.key;
  return recorded === undefined || recorded === key ? 'trusted' : 'key_changed';
}

describe('decideRelayKey', () => {
  it('trusts or refuses as the model does, with a typed reason and one sentence naming the URL', () => {
    fc.assert(
      fc.property(fc.tuple(choice, choice, choice), fc.tuple(choice, choice, choice), fc.nat(2), fc.nat(2), (pins, recorded, at, presented) => {
        const listed = URLS.map((url, i) => ({ url, pin: pins[i] }));
        const records: Record<string, RelayRecord> = Object.fromEntries(URLS.flatMap((url, i) => (recorded[i] === undefined ? [] : [[url, { key: recorded[i], first_seen: 1_000 * i }]])));
        const endpoint = listed[at]!;
        const key = KEYS[presented]!;
        const verdict = decideRelayKey(endpoint, key, listed, records);
        const expected = model(endpoint, key, listed, records);
        if (verdict.trusted) {
          expect(expected).toBe('trusted');
          expect(verdict.firstUse).toBe(endpoint.pin === undefined && records[endpoint.url] === undefined);
          return;
        }
        expect(verdict.refusal.reason).toBe(expected);
        expect(verdict.refusal).toMatchObject({ url: endpoint.url, key });
        const sentence = keyRefusalSentence(verdict.refusal);
        expect(sentence.startsWith(`relay ${endpoint.url} answers`)).toBe(true);
        expect(sentence).not.toContain('\n');
        if (verdict.refusal.reason === 'key_changed') {
          expect(sentence).toContain(`answers with a NEW key ${key} (recorded ${records[endpoint.url]!.key} since ${new Date(records[endpoint.url]!.first_seen).toISOString()})`);
          expect(sentence).toContain(`run \`interlink-mcp relay forget ${endpoint.url}\``);
        }
      }),
      { numRuns: 2_000 },
    );
  });
});

describe('the relays a command could not use, in words', () => {
  const changed: KeyRefusal = { reason: 'key_changed', url: 'ws://b:2', key: KEYS[1]!, recorded: KEYS[0]!, since: 0 };
  const down: Unanswered = { url: 'ws://a:1', trouble: { kind: 'unreachable', error: 'connection refused' } };
  const refused: Unanswered = { url: 'ws://b:2', trouble: { kind: 'untrusted', refusal: changed } };
  const silent: Unanswered = { url: 'ws://c:3', trouble: undefined };

  it('says "no relay answered" only when none answered, and names a refused key with `relay forget` otherwise', () => {
    const unreachable = noUsableRelay([down, silent]);
    expect(unreachable.code).toBe('relay_unreachable');
    expect(unreachable.message).toBe(
      'no relay answered: ws://a:1 (connection refused), ws://c:3 (no answer). Is the relay running? Start one with `interlink-mcp relay`, or set INTERLINK_URL to one that runs. Nothing was done.',
    );
    const untrusted = noUsableRelay([down, refused]);
    expect(untrusted.code).toBe('relay_untrusted');
    expect(untrusted.message).toBe(`no relay can be used: ws://a:1 (connection refused); relay ws://b:2 ${keyRefusalText(changed)}. Nothing was done.`);
    expect(untrusted.message).not.toContain('Is the relay running');
    expect(goingOnWithout([down])).toBe('no answer from ws://a:1 (connection refused)');
    expect(goingOnWithout([refused])).toBe(`not with ${keyRefusalSentence(changed)}`);
  });

  it("gives send_message a note only when a refused key is part of why nothing is connected", () => {
    expect(untrustedNote([down, silent])).toBeUndefined();
    expect(untrustedNote([down, refused])).toBe(`no relay is connected: ${unreachableList([down, refused])}. The message waits in the outbox and goes out once a relay is trusted (see list_pending)`);
  });
});
