/**
 * Seeded fuzzing of what a receiver does with a relay's payload, in the order the inbound
 * loop does it (agent/inbound.ts): `parseEnvelope`, then the trust gate `decide` with the
 * real signature check and the real seal opening.
 *
 * - Anything at all (hostile JSON values, bytes that may not even parse) ends in a typed
 *   refusal (`bad_envelope`, `too_large`) or a verdict; nothing else is thrown.
 * - A real message from a peer, edited as a relay or a damaged disk would edit it (one
 *   member replaced, dropped, added or wrapped; its JSON text cut, a bit flipped, a byte
 *   dropped or doubled), is refused, or admitted as exactly the message that was signed.
 *   Which admissions are possible is counted: only edits the signature does not cover
 *   (members the schema drops, the same JSON written differently) may pass.
 * - A paired peer may seal anything: hostile plaintext under the real shared key is
 *   refused as `bad_seal` or admitted with fields that pass the clear fields' rules.
 *
 * FUZZ_RUNS cases per property (default 2,000; `npm run fuzz` runs 100,000).
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { isWellFormedUnicode } from '../../src/config/paths.js';
import { InterlinkError } from '../../src/errors.js';
import { envelopeSchema, parseEnvelope, wireOf, type Envelope, type SealedWire, type WireEnvelope } from '../../src/envelope/envelope.js';
import { openEnvelope } from '../../src/envelope/open.js';
import { signEnvelope } from '../../src/envelope/sign.js';
import { signedBytes } from '../../src/envelope/signed-bytes.js';
import { sealPlaintext } from '../../src/envelope/seal.js';
import { decide, type GateContext, type Verdict } from '../../src/gate/decide.js';
import { encodeBase64url } from '../../src/identity/base64url.js';
import { signBytes } from '../../src/identity/ed25519.js';
import { newIdentity } from '../helpers/fixtures.js';
import { fuzzLabel, fuzzParameters, fuzzRuns, fuzzTimeout, hostileBytes, hostileString, hostileValue, editedJson } from '../helpers/fuzz.js';

const RUNS = fuzzRuns(2_000);
const NOW = 1_900_000_000_000;

const me = newIdentity();
const peer = newIdentity();
const SESSION = 'main';

function context(): GateContext {
  return {
    me: me.key,
    session: SESSION,
    peers: new Map([[peer.key, 'alice']]),
    clear: { has: (key: string) => key === peer.key },
    outstandingRequests: [],
    now: NOW,
    seen: () => false,
    open: (sealed: SealedWire) => openEnvelope(me.signingKey, sealed),
  };
}

const parseRefusals = new Set(['bad_envelope', 'too_large']);

/** parse → gate, as the inbound loop runs them; a thrown InterlinkError is returned as a refusal. */
function receive(payload: unknown): { parsed: false; code: string } | { parsed: true; verdict: Verdict } {
  let wire: WireEnvelope;
  try {
    wire = parseEnvelope(payload);
  } catch (err) {
    if (!(err instanceof InterlinkError) || !parseRefusals.has(err.code)) throw err;
    return { parsed: false, code: err.code };
  }
  return { parsed: true, verdict: decide(wire, context()) };
}

/** The message a receiver would store, as canonical JSON (members sorted), to compare admissions. */
function canonical(envelope: Envelope): string {
  const sorted = Object.fromEntries(Object.entries(envelope).sort(([a], [b]) => a.localeCompare(b)));
  return JSON.stringify(sorted);
}

/** Real messages a peer sends: sealed (version 4) and clear (3 and 2), with any of the optional fields. */
const realMessage = fc
  .record({
    version: fc.constantFrom(4, 3, 2),
    text: fc.oneof(fc.string({ maxLength: 60 }), fc.constantFrom('', 'hello', 'naïve \u202e text\n')),
    task_id: fc.option(fc.constantFrom('t-1', 'build #7', 'ü'), { nil: undefined }),
    status: fc.option(fc.constantFrom('update' as const, 'result' as const, 'needs_input' as const), { nil: undefined }),
    in_reply_to: fc.option(fc.constant('0123456789abcdef0123456789abcdef'), { nil: undefined }),
    reply: fc.boolean(),
    kind: fc.constantFrom('message', 'receipt'),
  })
  .map((m): Envelope => {
    const versioned = m.version !== 2;
    return signEnvelope(peer.signingKey, {
      to: me.key,
      ...(versioned && { to_session: SESSION }),
      ...(m.version === 3 && { version: 3 as const }),
      text: isWellFormedUnicode(m.text) ? m.text : 'x',
      ts: NOW - 1_000,
      kind: m.kind,
      ...(m.task_id !== undefined && { task_id: m.task_id }),
      ...(m.status !== undefined && { status: m.status }),
      ...(m.in_reply_to !== undefined && { in_reply_to: m.in_reply_to }),
      ...(m.reply && versioned && { reply_to: `${peer.key}#side` }),
    });
  });

describe('the receiving path under hostile payloads', () => {
  it(`ends anything at all in a typed refusal or a verdict ${fuzzLabel(RUNS)}`, () => {
    const anything = fc.oneof(
      hostileValue,
      hostileBytes('{"v":4}').map((bytes) => {
        try {
          return JSON.parse(bytes.toString('utf8')) as unknown;
        } catch {
          return bytes.toString('latin1');
        }
      }),
    );
    fc.assert(
      fc.property(anything, (payload) => {
        receive(payload);
      }),
      fuzzParameters(RUNS),
    );
  }, fuzzTimeout(RUNS, 2));

  it(`refuses an edited message, or admits exactly the message that was signed ${fuzzLabel(RUNS)}`, () => {
    const admittedAfterEdit: string[] = [];
    const edited = realMessage.chain((envelope) => {
      const wire = wireOf(envelope);
      const text = JSON.stringify(wire);
      const asValue = editedJson(wire).map((value) => ({ how: 'value', payload: value }));
      const asText = hostileBytes(text).map((bytes) => {
        try {
          return { how: 'text', payload: JSON.parse(bytes.toString('utf8')) as unknown };
        } catch {
          return { how: 'text', payload: bytes.toString('utf8') as unknown };
        }
      });
      return fc.tuple(fc.constant(envelope), fc.oneof(asValue, asText));
    });
    fc.assert(
      fc.property(edited, ([envelope, { how, payload }]) => {
        const original = receive(wireOf(envelope));
        if (!original.parsed || !original.verdict.ok) throw new Error(`the unedited message was refused: ${JSON.stringify(original)}`);
        const outcome = receive(payload);
        if (!outcome.parsed || !outcome.verdict.ok) return;
        // Admitted: it must be the very message the peer signed.
        expect(canonical(outcome.verdict.envelope)).toBe(canonical(original.verdict.envelope));
        expect(outcome.verdict.admission).toBe(original.verdict.admission);
        if (JSON.stringify(payload) !== JSON.stringify(wireOf(envelope))) admittedAfterEdit.push(how);
      }),
      fuzzParameters(RUNS),
    );
    // Some edits are invisible to the signature (an added member the schema drops); none may change the message.
    expect(admittedAfterEdit.length).toBeLessThan(RUNS);
  }, fuzzTimeout(RUNS, 2));

  it(`opens hostile plaintext a peer sealed with the real key to bad_seal or to fields within the rules ${fuzzLabel(RUNS)}`, () => {
    const header = { to_session: SESSION, ts: NOW - 1_000, kind: 'message', msg_id: 'fedcba9876543210fedcba9876543210' };
    const plaintext = fc.oneof(
      fc.uint8Array({ maxLength: 600 }).map((bytes) => Buffer.from(bytes)),
      fc.array(fc.oneof(hostileString, fc.constant('')), { minLength: 1, maxLength: 7 }).map((fields) =>
        Buffer.concat(
          fields.flatMap((field) => {
            const bytes = Buffer.from(field);
            const length = Buffer.alloc(4);
            length.writeUInt32LE(bytes.length);
            return [length, bytes];
          }),
        ),
      ),
    );
    fc.assert(
      fc.property(plaintext, fc.nat({ max: 3 }), (body, padding) => {
        const padded = Buffer.concat([body, Buffer.alloc(padding * 64)]);
        const sealed = encodeBase64url(sealPlaintext(peer.signingKey, me.key, header, padded));
        const unsigned = { v: 4 as const, from: peer.key, to: me.key, ...header, sealed };
        const wire = { ...unsigned, sig: encodeBase64url(signBytes(peer.signingKey, signedBytes(unsigned))) };
        const outcome = receive(wire);
        if (!outcome.parsed) return;
        const { verdict } = outcome;
        if (!verdict.ok) {
          expect(['bad_seal', 'bad_envelope']).toContain(verdict.code);
          return;
        }
        // Whatever opened must pass the rules a clear message's fields pass.
        expect(envelopeSchema.safeParse(verdict.envelope).success).toBe(true);
      }),
      fuzzParameters(RUNS),
    );
  }, fuzzTimeout(RUNS, 2));
});
