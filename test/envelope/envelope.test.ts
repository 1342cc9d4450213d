/**
 * The signed envelope: what the signature covers, what it does not (`reply_to`), and what
 * `parseEnvelope` refuses at the edge. Every refusal must be an InterlinkError with a code.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { unsafeNameReason } from '../../src/config/paths.js';
import {
  KNOWN_KINDS,
  MAX_TEXT_BYTES,
  STATUSES,
  newMsgId,
  parseEnvelope,
  replyToSession,
  type Envelope,
  isSealed,
  parseStoredEnvelope,
  wireOf,
  type SealedWire,
} from '../../src/envelope/envelope.js';
import { openEnvelope } from '../../src/envelope/open.js';
import { offerable, signEnvelope, verifyEnvelope, type EnvelopeFields } from '../../src/envelope/sign.js';
import { signedBytes } from '../../src/envelope/signed-bytes.js';
import { InterlinkError, type ErrorCode } from '../../src/errors.js';
import { decodeBase64url, encodeBase64url } from '../../src/identity/base64url.js';
import { signBytes, signingKeyFromSeed } from '../../src/identity/ed25519.js';
import { paddedFields, sealPlaintext } from '../../src/envelope/seal.js';
import { strictVerify } from '../helpers/noble-oracle.js';

const alice = signingKeyFromSeed(Buffer.alloc(32, 0xa1));
const bob = signingKeyFromSeed(Buffer.alloc(32, 0xb0));
const carol = signingKeyFromSeed(Buffer.alloc(32, 0xc4));
const ALICE = alice.publicKey.toString('base64url');
const BOB = bob.publicKey.toString('base64url');
const CAROL = carol.publicKey.toString('base64url');
const MSG_ID = '00112233445566778899aabbccddeeff';
const TS = 1_767_225_600_000;
const BASE64URL = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_';

type Wire = Record<string, unknown>;

function codeOf(run: () => unknown): ErrorCode | 'ok' {
  try {
    run();
    return 'ok';
  } catch (err) {
    if (err instanceof InterlinkError) return err.code;
    throw err;
  }
}

/** A copy of `envelope` with `key` set, or removed when `value` is undefined. */
function withField(envelope: Wire, key: string, value: unknown): Wire {
  const copy: Wire = { ...envelope };
  if (value === undefined) delete copy[key];
  else copy[key] = value;
  return copy;
}

function oracleAccepts(envelope: Envelope): boolean {
  return strictVerify(decodeBase64url(envelope.from, 32, 'from'), signedBytes(envelope), decodeBase64url(envelope.sig, 64, 'sig'));
}

const base = signEnvelope(alice, { to: BOB, text: 'hello', ts: TS, msg_id: MSG_ID });

const hexId = fc.stringMatching(/^[0-9a-f]{32}$/);
const textArb = fc.oneof(fc.string({ unit: 'binary', maxLength: 80 }), fc.string({ unit: 'grapheme', maxLength: 40 }));
const taskIdArb = fc
  .string({ unit: 'grapheme', minLength: 1, maxLength: 12 })
  .filter((s) => Buffer.byteLength(s, 'utf8') <= 128 && !/[\u0000-\u001f\u007f]/.test(s));
const sessionArb = fc.string({ unit: 'grapheme-ascii', minLength: 1, maxLength: 24 }).filter((s) => unsafeNameReason(s) === undefined);

const fieldsArb: fc.Arbitrary<EnvelopeFields> = fc.record(
  {
    to: fc.constantFrom(BOB, CAROL, ALICE),
    text: textArb,
    kind: fc.oneof(fc.constantFrom(...KNOWN_KINDS), fc.stringMatching(/^[a-z][a-z0-9_]{0,31}$/)),
    task_id: taskIdArb,
    status: fc.constantFrom(...STATUSES),
    in_reply_to: hexId,
    reply_to: sessionArb.map((session) => `${ALICE}#${session}`),
    ts: fc.integer({ min: 0, max: Number.MAX_SAFE_INTEGER }),
    msg_id: hexId,
  },
  { requiredKeys: ['to', 'text'] },
);

describe('sign and verify', () => {
  it('round-trips through JSON with any text and any subset of optional fields', () => {
    fc.assert(
      fc.property(fieldsArb, (fields) => {
        const envelope = signEnvelope(alice, fields);
        const received = parseStoredEnvelope(JSON.parse(JSON.stringify(envelope)));
        expect(received).toEqual(envelope);
        expect(verifyEnvelope(received)).toBe(true);
        expect(oracleAccepts(received)).toBe(true);
        expect(received.text).toBe(fields.text);
        expect(received.kind).toBe(fields.kind ?? 'message');
        for (const key of ['task_id', 'status', 'in_reply_to', 'reply_to'] as const) {
          expect(key in received).toBe(fields[key] !== undefined);
        }
      }),
      { numRuns: 200 },
    );
  });

  it('an absent kind is read as "message" and keeps the signature valid', () => {
    const received = parseStoredEnvelope(withField(base, 'kind', undefined));
    expect(received.kind).toBe('message');
    expect(verifyEnvelope(received)).toBe(true);
  });

  it('lays out the signed bytes as the protocol document says', () => {
    const envelope = signEnvelope(alice, { to: BOB, text: 'é', ts: 0x0102030405, msg_id: MSG_ID, status: 'result' });
    const expected = Buffer.concat([
      Buffer.from('interlink-v2\0', 'latin1'),
      alice.publicKey,
      bob.publicKey,
      Buffer.from('0504030201000000', 'hex'),
      Buffer.from('07000000', 'hex'),
      Buffer.from('message'),
      Buffer.from('20000000', 'hex'),
      Buffer.from(MSG_ID),
      Buffer.from('02000000c3a9', 'hex'),
      Buffer.from('06000000', 'hex'),
      Buffer.from('result'),
      Buffer.from('00000000', 'hex'),
      Buffer.from('00000000', 'hex'),
    ]);
    expect(signedBytes(envelope).toString('hex')).toBe(expected.toString('hex'));
  });

  it('an absent optional field and an empty one would sign the same bytes, which is why empty ones are refused', () => {
    const { sig: _sig, ...unsigned } = base;
    expect(signedBytes({ ...unsigned, task_id: '' }).equals(signedBytes(unsigned))).toBe(true);
    expect(codeOf(() => parseStoredEnvelope({ ...base, task_id: '' }))).toBe('bad_envelope');
  });
});

describe('tampering with a signed field', () => {
  const flipHexDigit = (id: string, at: number): string => {
    const i = at % id.length;
    const digit = parseInt(id[i]!, 16) ^ 1;
    return id.slice(0, i) + digit.toString(16) + id.slice(i + 1);
  };
  const flipKeyBit = (key: string, bit: number): string => {
    const bytes = decodeBase64url(key, 32, 'key');
    bytes[(bit >> 3) % 32] = bytes[(bit >> 3) % 32]! ^ (1 << (bit & 7));
    return bytes.toString('base64url');
  };
  const flipSigBit = (sig: string, bit: number): string => {
    const bytes = decodeBase64url(sig, 64, 'sig');
    bytes[(bit >> 3) % 64] = bytes[(bit >> 3) % 64]! ^ (1 << (bit & 7));
    return bytes.toString('base64url');
  };
  /** Flips the lowest bit of one code point; code points from the arbitraries are never surrogates. */
  const flipCodePoint = (text: string, at: number): string => {
    const points = Array.from(text);
    if (points.length === 0) return 'x';
    const i = at % points.length;
    points[i] = String.fromCodePoint(points[i]!.codePointAt(0)! ^ 1);
    return points.join('');
  };

  const mutations: Record<string, (e: Envelope, n: number) => Wire> = {
    text: (e, n) => withField(e, 'text', flipCodePoint(e.text, n)),
    // At the largest ts a step up would leave the schema; a step down changes it just as well.
    'ts + 1': (e) => withField(e, 'ts', e.ts < Number.MAX_SAFE_INTEGER ? e.ts + 1 : e.ts - 1),
    'ts - 1': (e) => withField(e, 'ts', e.ts > 0 ? e.ts - 1 : 2),
    msg_id: (e, n) => withField(e, 'msg_id', flipHexDigit(e.msg_id, n)),
    kind: (e) => withField(e, 'kind', e.kind === 'message' ? 'pair_request' : 'message'),
    task_id: (e) => withField(e, 'task_id', e.task_id === undefined ? 't' : e.task_id === 't' ? undefined : 't'),
    status: (e, n) => {
      const others = STATUSES.filter((s) => s !== e.status);
      return withField(e, 'status', e.status !== undefined && n % 2 === 0 ? undefined : others[n % others.length]);
    },
    in_reply_to: (e, n) =>
      withField(e, 'in_reply_to', e.in_reply_to === undefined ? MSG_ID : n % 2 === 0 ? undefined : flipHexDigit(e.in_reply_to, n)),
    'to: another identity': (e) => withField(e, 'to', e.to === CAROL ? BOB : CAROL),
    'to: one bit': (e, n) => withField(e, 'to', flipKeyBit(e.to, n)),
    'from: another identity': (e) => withField(e, 'from', CAROL),
    'from: one bit': (e, n) => withField(e, 'from', flipKeyBit(e.from, n)),
    'from and to swapped': (e) => withField(withField(e, 'from', e.to), 'to', e.from),
    sig: (e, n) => withField(e, 'sig', flipSigBit(e.sig, n)),
  };

  it('every change to a signed field, or to the signature, is refused', () => {
    fc.assert(
      fc.property(
        fieldsArb.filter((f) => f.to !== ALICE),
        fc.constantFrom(...Object.keys(mutations)),
        fc.nat(),
        (fields, name, n) => {
          const envelope = signEnvelope(alice, fields);
          const tampered = parseStoredEnvelope(mutations[name]!(envelope, n));
          expect(signedBytes(tampered).equals(signedBytes(envelope)) && tampered.sig === envelope.sig).toBe(false);
          expect(verifyEnvelope(tampered)).toBe(false);
          expect(oracleAccepts(tampered)).toBe(false);
        },
      ),
      { numRuns: 400 },
    );
  });
});

describe('reply_to', () => {
  const signed = signEnvelope(alice, { to: BOB, text: 'question', ts: TS, msg_id: MSG_ID, reply_to: `${ALICE}#session-1` });

  it('is not signed: changing or removing it leaves the signature valid', () => {
    expect(verifyEnvelope(parseStoredEnvelope({ ...signed, reply_to: `${ALICE}#session-2` }))).toBe(true);
    expect(verifyEnvelope(parseStoredEnvelope({ ...signed, reply_to: `${CAROL}#session-1` }))).toBe(true);
    expect(verifyEnvelope(parseStoredEnvelope(withField(signed, 'reply_to', undefined)))).toBe(true);
  });

  it('is honoured only when its key is the signed sender', () => {
    expect(replyToSession(signed)).toBe('session-1');
    expect(replyToSession(parseStoredEnvelope({ ...signed, reply_to: `${ALICE}#session-2` }))).toBe('session-2');
    expect(replyToSession(parseStoredEnvelope({ ...signed, reply_to: `${CAROL}#session-1` }))).toBeUndefined();
    expect(replyToSession(parseStoredEnvelope({ ...signed, reply_to: `${BOB}#session-1` }))).toBeUndefined();
    expect(replyToSession(base)).toBeUndefined();
  });

  it('keeps everything after the first # as the session', () => {
    expect(replyToSession(parseStoredEnvelope({ ...signed, reply_to: `${ALICE}#a#b` }))).toBe('a#b');
  });
});

describe('parseEnvelope refuses', () => {
  /** The last character of a canonical encoding carries zero low bits; setting one keeps the bytes but breaks canonicity. */
  const nonCanonicalTail = (text: string): string => text.slice(0, -1) + BASE64URL[BASE64URL.indexOf(text.slice(-1)) + 1]!;

  const badBase64url = (field: 'from' | 'to' | 'sig'): [string, Wire][] => {
    const value = base[field];
    return [
      [`${field} with padding`, { ...base, [field]: value + '=' }],
      [`${field} one character short`, { ...base, [field]: value.slice(0, -1) }],
      [`${field} one character long`, { ...base, [field]: value + 'A' }],
      [`${field} in standard base64`, { ...base, [field]: '+' + value.slice(1) }],
      [`${field} with a slash`, { ...base, [field]: value.slice(0, -1) + '/' }],
      [`${field} with a dot`, { ...base, [field]: '.' + value.slice(1) }],
      [`${field} with a space`, { ...base, [field]: ' ' + value.slice(1) }],
      [`${field} with non-canonical trailing bits`, { ...base, [field]: nonCanonicalTail(value) }],
      [`${field} as bytes`, { ...base, [field]: [1, 2, 3] }],
      [`${field} missing`, withField(base, field, undefined)],
    ];
  };

  const badEnvelopes: [string, unknown][] = [
    ...badBase64url('from'),
    ...badBase64url('to'),
    ...badBase64url('sig'),
    ['msg_id in upper case', { ...base, msg_id: MSG_ID.toUpperCase() }],
    ['msg_id of 31 digits', { ...base, msg_id: MSG_ID.slice(1) }],
    ['msg_id of 33 digits', { ...base, msg_id: MSG_ID + '0' }],
    ['msg_id with a non-hex digit', { ...base, msg_id: 'g' + MSG_ID.slice(1) }],
    ['msg_id with a newline', { ...base, msg_id: MSG_ID + '\n' }],
    ['msg_id as a number', { ...base, msg_id: 1234 }],
    ['msg_id missing', withField(base, 'msg_id', undefined)],
    ['in_reply_to not 32 lowercase hex', { ...base, in_reply_to: MSG_ID.toUpperCase() }],
    ['empty task_id', { ...base, task_id: '' }],
    ['empty status', { ...base, status: '' }],
    ['empty in_reply_to', { ...base, in_reply_to: '' }],
    ['empty reply_to', { ...base, reply_to: '' }],
    ['null task_id', { ...base, task_id: null }],
    ['null status', { ...base, status: null }],
    ['task_id of 129 bytes', { ...base, task_id: 'x'.repeat(129) }],
    ['task_id with a control character', { ...base, task_id: 'a\tb' }],
    ['task_id with DEL', { ...base, task_id: 'a\u007f' }],
    ['unknown status', { ...base, status: 'done' }],
    ['status in upper case', { ...base, status: 'Update' }],
    ['empty kind', { ...base, kind: '' }],
    ['kind with upper case', { ...base, kind: 'Message' }],
    ['kind starting with a digit', { ...base, kind: '1message' }],
    ['kind with a hyphen', { ...base, kind: 'pair-request' }],
    ['kind with a space', { ...base, kind: 'pair request' }],
    ['kind of 33 characters', { ...base, kind: 'k'.repeat(33) }],
    ['kind as null', { ...base, kind: null }],
    ['reply_to session "../x"', { ...base, reply_to: `${ALICE}#../x` }],
    ['reply_to session ".."', { ...base, reply_to: `${ALICE}#..` }],
    ['reply_to session "a/b"', { ...base, reply_to: `${ALICE}#a/b` }],
    ['reply_to session with a backslash', { ...base, reply_to: `${ALICE}#a\\b` }],
    ['reply_to session with NUL', { ...base, reply_to: `${ALICE}#a\u0000b` }],
    ['reply_to with an empty session', { ...base, reply_to: `${ALICE}#` }],
    ['reply_to session over 128 bytes', { ...base, reply_to: `${ALICE}#${'s'.repeat(129)}` }],
    ['reply_to without a session', { ...base, reply_to: ALICE }],
    ['reply_to with a bad key', { ...base, reply_to: `not-a-key#s` }],
    ['ts with a fraction', { ...base, ts: TS + 0.5 }],
    ['negative ts', { ...base, ts: -1 }],
    ['ts as a string', { ...base, ts: String(TS) }],
    ['ts beyond 2^53 - 1', { ...base, ts: Number.MAX_SAFE_INTEGER + 1 }],
    ['ts NaN', { ...base, ts: Number.NaN }],
    ['ts Infinity', { ...base, ts: Number.POSITIVE_INFINITY }],
    ['ts missing', withField(base, 'ts', undefined)],
    ['text as a number', { ...base, text: 5 }],
    ['text missing', withField(base, 'text', undefined)],
    ['null', null],
    ['undefined', undefined],
    ['a number', 42],
    ['a string', JSON.stringify(base)],
    ['an array', [base]],
    ['true', true],
    ['an empty object', {}],
  ];

  it.each(badEnvelopes)('%s with bad_envelope', (_name, input) => {
    expect(codeOf(() => parseStoredEnvelope(input))).toBe('bad_envelope');
  });

  it('accepts the boundary values next to those refusals', () => {
    expect(codeOf(() => parseStoredEnvelope({ ...base, kind: 'k'.repeat(32) }))).toBe('ok');
    expect(codeOf(() => parseStoredEnvelope({ ...base, task_id: 'é'.repeat(64) }))).toBe('ok');
    expect(codeOf(() => parseStoredEnvelope({ ...base, ts: 0 }))).toBe('ok');
    expect(codeOf(() => parseStoredEnvelope({ ...base, ts: Number.MAX_SAFE_INTEGER }))).toBe('ok');
    expect(codeOf(() => parseStoredEnvelope({ ...base, reply_to: `${ALICE}#${'s'.repeat(128)}` }))).toBe('ok');
    expect(codeOf(() => parseStoredEnvelope({ ...base, text: '' }))).toBe('ok');
  });

  it('ignores unknown fields, which are not signed', () => {
    const received = parseStoredEnvelope({ ...base, extra: 'x' });
    expect('extra' in received).toBe(false);
    expect(verifyEnvelope(received)).toBe(true);
  });
});

describe('text size limit', () => {
  const cases: [string, string][] = [
    ['2-byte characters', 'é'],
    ['3-byte characters', '€'],
    ['4-byte characters', '😀'],
  ];

  it.each(cases)('is 256 KiB of UTF-8, counted in bytes (%s)', (_name, char) => {
    const width = Buffer.byteLength(char, 'utf8');
    const atLimit = char.repeat(Math.floor(MAX_TEXT_BYTES / width)) + 'a'.repeat(MAX_TEXT_BYTES % width);
    expect(Buffer.byteLength(atLimit, 'utf8')).toBe(MAX_TEXT_BYTES);
    expect(codeOf(() => parseStoredEnvelope({ ...base, text: atLimit }))).toBe('ok');
    expect(codeOf(() => parseStoredEnvelope({ ...base, text: atLimit + 'a' }))).toBe('too_large');
    expect(codeOf(() => parseStoredEnvelope({ ...base, text: atLimit + char }))).toBe('too_large');
    // Far fewer UTF-16 units than bytes: the limit is not a string length.
    expect(atLimit.length).toBeLessThan(MAX_TEXT_BYTES);
  });

  it('signs and verifies a text at the limit, and refuses to sign one over it', () => {
    const atLimit = '€'.repeat(87_381) + 'a';
    const envelope = signEnvelope(alice, { to: BOB, text: atLimit, ts: TS, msg_id: MSG_ID });
    expect(verifyEnvelope(envelope)).toBe(true);
    expect(codeOf(() => signEnvelope(alice, { to: BOB, text: atLimit + 'é', ts: TS, msg_id: MSG_ID }))).toBe('too_large');
  });
});

describe('parseEnvelope on arbitrary input', () => {
  const expectOnlyInterlinkErrors = (input: unknown): void => {
    try {
      const envelope = parseEnvelope(input);
      expect(typeof verifyEnvelope(envelope)).toBe('boolean');
      if (!isSealed(envelope)) replyToSession(envelope);
    } catch (err) {
      expect(err).toBeInstanceOf(InterlinkError);
      expect(['bad_envelope', 'too_large']).toContain(err instanceof InterlinkError ? err.code : undefined);
    }
  };

  it('throws nothing but InterlinkError on any JSON value', () => {
    fc.assert(fc.property(fc.jsonValue(), expectOnlyInterlinkErrors), { numRuns: 500 });
  });

  it('throws nothing but InterlinkError on valid envelopes with fields replaced, removed or added', () => {
    const keys = [...Object.keys(base), 'task_id', 'status', 'in_reply_to', 'reply_to', 'extra', '__proto__', 'constructor'];
    fc.assert(
      fc.property(
        fc.dictionary(fc.oneof(fc.constantFrom(...keys), fc.string()), fc.option(fc.jsonValue(), { nil: undefined }), { maxKeys: 4 }),
        (changes) => {
          let input: Wire = { ...base };
          for (const [key, value] of Object.entries(changes)) input = withField(input, key, value);
          expectOnlyInterlinkErrors(input);
          expectOnlyInterlinkErrors(JSON.parse(JSON.stringify(input)));
        },
      ),
      { numRuns: 500 },
    );
  });
});

describe('unicode', () => {
  it('refuses unpaired surrogates, which would share signed bytes with U+FFFD', () => {
    const signed = signEnvelope(alice, { to: BOB, text: 'ok \uFFFD', task_id: 't\uFFFD' });
    for (const forged of [{ ...signed, text: 'ok \ud800' }, { ...signed, task_id: 't\udc00' }]) {
      expect(signedBytes(forged)).toEqual(signedBytes(signed));
      expect(() => parseEnvelope(forged)).toThrow(/well-formed Unicode/);
    }
    expect(() => parseEnvelope(signEnvelope(alice, { to: BOB, text: 'pair \ud83d\ude00 ok' }))).not.toThrow();
  });
});

describe('signing', () => {
  it('refuses bad fields before signing, as bad_envelope', () => {
    for (const fields of [{ ts: -1 }, { ts: 1.5 }, { msg_id: 'nope' }, { task_id: '' }, { to: 'short' }]) {
      let error: unknown;
      try {
        signEnvelope(alice, { to: BOB, text: 'x', ...fields });
      } catch (err) {
        error = err;
      }
      expect(error).toBeInstanceOf(InterlinkError);
      expect((error as InterlinkError).code).toBe('bad_envelope');
    }
  });
});

describe('newMsgId', () => {
  it('gives 32 lowercase hex digits, never the same twice, across refills of its random pool', () => {
    const ids = Array.from({ length: 2_000 }, () => newMsgId());
    for (const id of ids) expect(id).toMatch(/^[0-9a-f]{32}$/);
    expect(new Set(ids).size).toBe(ids.length);
  });
});

describe('offerable: what a relay is offered for a stored outgoing envelope', () => {
  const bobKey = signingKeyFromSeed(Buffer.alloc(32, 7));
  const bob = bobKey.publicKey.toString('base64url');

  it('is the wire form of a sealed envelope, without its opened body', () => {
    const sealed = signEnvelope(alice, { to: bob, to_session: 'b1', text: 'secret', task_id: 't1' });
    const offered = offerable(alice, sealed);
    expect(offered).toEqual(wireOf(sealed));
    expect(offered).not.toHaveProperty('text');
  });

  it('seals and signs again a clear version 3 envelope an older version left pending: the same msg_id, ts and body', () => {
    const legacy = signEnvelope(alice, { to: bob, to_session: 'b1', text: 'left pending', task_id: 't1', status: 'update', reply_to: `${ALICE}#a1`, version: 3 });
    const offered = offerable(alice, legacy);
    expect(offered).toMatchObject({ v: 4, msg_id: legacy.msg_id, ts: legacy.ts, to: bob, to_session: 'b1' });
    expect(verifyEnvelope(offered)).toBe(true);
    const opened = openEnvelope(bobKey, offered as SealedWire);
    expect(opened).toMatchObject({ text: 'left pending', task_id: 't1', status: 'update', reply_to: `${ALICE}#a1` });
  });

  it('leaves a clear version 2 envelope (for a peer marked clear) as it is', () => {
    const v2 = signEnvelope(alice, { to: bob, text: 'for the Rust peer' });
    expect(offerable(alice, v2)).toBe(v2);
  });
});

describe('openEnvelope: the opened fields obey the rules of the clear ones', () => {
  const header = { to_session: 'b1', ts: TS, kind: 'message', msg_id: MSG_ID };

  /** A body alice seals to bob by hand: text, status, task_id, in_reply_to, reply session. */
  function sealedWith(fields: (string | undefined)[]): SealedWire {
    const sealed = encodeBase64url(sealPlaintext(alice, BOB, header, paddedFields(fields)));
    const unsigned = { v: 4 as const, from: ALICE, to: BOB, ...header, sealed };
    return { ...unsigned, sig: encodeBase64url(signBytes(alice, signedBytes(unsigned))) };
  }

  const open = (fields: (string | undefined)[]) => openEnvelope(bob, sealedWith(fields));
  const refusal = (fields: (string | undefined)[]) => {
    try {
      open(fields);
    } catch (err) {
      expect(err).toBeInstanceOf(InterlinkError);
      return `${(err as InterlinkError).code}: ${(err as InterlinkError).message}`;
    }
    return 'opened';
  };

  it('refuses each field just past its rule as bad_seal, naming the field', () => {
    expect(refusal(['x'.repeat(MAX_TEXT_BYTES + 1)])).toMatch(/^bad_seal: the sealed text must be at most/);
    expect(refusal(['hi', 'done'])).toMatch(/^bad_seal: the sealed status /);
    expect(refusal(['hi', undefined, 't'.repeat(129)])).toMatch(/^bad_seal: the sealed task_id /);
    expect(refusal(['hi', undefined, 'a\u0007b'])).toMatch(/^bad_seal: the sealed task_id /);
    expect(refusal(['hi', undefined, undefined, MSG_ID.toUpperCase()])).toMatch(/^bad_seal: the sealed in_reply_to /);
    expect(refusal(['hi', undefined, undefined, undefined, '..'])).toMatch(/^bad_seal: the sealed reply_session /);
    expect(refusal(['hi', undefined, undefined, undefined, ' s'])).toMatch(/^bad_seal: the sealed reply_session /);
  });

  it('opens each field at its limit, into the envelope the sender would have signed in clear', () => {
    const fields = ['x'.repeat(MAX_TEXT_BYTES), 'needs_input', 't'.repeat(128), MSG_ID, 'a1'];
    const wire = sealedWith(fields);
    const opened = openEnvelope(bob, wire);
    // Key order too: what the mailbox writes is this object's JSON.
    expect(Object.keys(opened)).toEqual(['v', 'from', 'to', 'to_session', 'ts', 'msg_id', 'kind', 'sealed', 'sig', 'text', 'task_id', 'status', 'in_reply_to', 'reply_to']);
    expect(opened).toEqual({ ...wire, text: fields[0], status: 'needs_input', task_id: fields[2], in_reply_to: MSG_ID, reply_to: `${ALICE}#a1` });
    expect(parseStoredEnvelope(opened)).toEqual(opened);
    const empty = sealedWith(['']);
    expect(openEnvelope(bob, empty)).toEqual({ ...empty, text: '' });
  });
});
