/**
 * Ed25519 throughput: the project's node:crypto wrapper, pure-JS @noble/ed25519 for
 * scale, and the whole envelope path a relay or receiver runs per message.
 */
import { randomBytes } from 'node:crypto';
import * as ed from '@noble/ed25519';
import { sha512 } from '@noble/hashes/sha2.js';
import { parseEnvelope } from '../../src/envelope/envelope.js';
import { signEnvelope, verifyEnvelope } from '../../src/envelope/sign.js';
import { generateSigningKey, signBytes, verifyBytes } from '../../src/identity/ed25519.js';
import type { Benchmark, Section } from './report.js';
import { newCorrespondents, randomText } from './records.js';
import { formatCount, formatMicros, formatRatio, measureRate, type RateOptions, type RateResult } from './stats.js';

const MESSAGE_BYTES = 1024;
const TARGET_VERIFY_PER_SECOND = 10_000;
const RATE: RateOptions = { warmupMs: 300, durationMs: 2000, slices: 10 };

interface Pair {
  name: string;
  sign: RateResult;
  verify: RateResult;
}

function fail(what: string): never {
  throw new Error(`signature benchmark: ${what}`);
}

function measureNode(message: Buffer): Pair {
  const key = generateSigningKey();
  const signature = signBytes(key, message);
  let sink = 0;
  const sign = measureRate(() => {
    sink ^= signBytes(key, message)[0]!;
  }, RATE);
  const verify = measureRate(() => {
    if (!verifyBytes(key.publicKey, message, signature)) fail('node:crypto rejected a valid signature');
  }, RATE);
  if (sink < 0) fail('unreachable');
  return { name: 'node:crypto (`signBytes`/`verifyBytes`)', sign, verify };
}

function measureNoble(message: Buffer): Pair {
  ed.hashes.sha512 = sha512;
  const key = generateSigningKey();
  const publicKey = ed.getPublicKey(key.seed);
  const signature = ed.sign(message, key.seed);
  // Ed25519 is deterministic: both libraries must produce the same bytes from one seed.
  if (!Buffer.from(signature).equals(signBytes(key, message))) fail('noble and node:crypto signatures differ');
  let sink = 0;
  const sign = measureRate(() => {
    sink ^= ed.sign(message, key.seed)[0]!;
  }, RATE);
  const verify = measureRate(() => {
    if (!ed.verify(signature, message, publicKey, { zip215: false })) fail('noble rejected a valid signature');
  }, RATE);
  if (sink < 0) fail('unreachable');
  return { name: '@noble/ed25519 sync (`zip215: false`)', sign, verify };
}

/** ~1 KiB of text in, wire JSON out; wire JSON in, a verified envelope out. */
function measureEnvelope(): Pair {
  const who = newCorrespondents();
  const text = randomText(MESSAGE_BYTES);
  const wire = JSON.stringify(signEnvelope(who.sender, { to: who.recipient, to_session: 'main', text }));
  let sink = 0;
  const sign = measureRate(() => {
    sink += JSON.stringify(signEnvelope(who.sender, { to: who.recipient, to_session: 'main', text })).length;
  }, RATE);
  const verify = measureRate(() => {
    if (!verifyEnvelope(parseEnvelope(JSON.parse(wire)))) fail('a valid envelope did not verify');
  }, RATE);
  if (sink < 0) fail('unreachable');
  return { name: 'Envelope (`signEnvelope` / `verifyEnvelope(parseEnvelope(JSON.parse(…)))`)', sign, verify };
}

function rateCells(rate: RateResult): string[] {
  return [formatCount(rate.median), `${formatCount(rate.min)}–${formatCount(rate.max)}`, formatMicros(1000 / rate.median)];
}

export const signatures: Benchmark = {
  id: 'signatures',
  async run(context): Promise<Section> {
    const message = randomBytes(MESSAGE_BYTES);
    context.progress('signatures: node:crypto');
    const node = measureNode(message);
    context.progress('signatures: @noble/ed25519');
    const noble = measureNoble(message);
    context.progress('signatures: envelope path');
    const envelope = measureEnvelope();

    const rows = [node, noble, envelope].map((p) => [p.name, ...rateCells(p.sign), ...rateCells(p.verify)]);
    rows.push(['Ratio node:crypto / noble', formatRatio(node.sign.median / noble.sign.median), '', '', formatRatio(node.verify.median / noble.verify.median), '', '']);
    return {
      title: 'Ed25519 signatures',
      measures: [
        `Operations per second on one core, one synchronous loop per operation: ${RATE.warmupMs} ms of warm-up, then ${RATE.durationMs / 1000} s cut into ${RATE.slices} slices; the table gives the median slice and the range over slices.`,
        `Rows 1–2 sign and verify one random ${MESSAGE_BYTES}-byte message with one key (node:crypto imports the public key once and caches it, as the relay does for known peers; \`verifyBytes\` also runs the strict canonical-encoding and small-order checks before OpenSSL).`,
        `Row 3 is the per-message path: signing builds, signs, schema-validates and serializes an envelope with ${MESSAGE_BYTES} characters of text; verifying parses the wire JSON, validates it with the zod schema, rebuilds the signed bytes and verifies.`,
      ].join(' '),
      tables: [
        {
          headers: ['Implementation:', 'sign/s', 'sign/s range', 'µs/sign', 'verify/s', 'verify/s range', 'µs/verify'],
          rows,
        },
      ],
      checks: [
        {
          target: `node:crypto verifications ≥ ${formatCount(TARGET_VERIFY_PER_SECOND)}/s on one core`,
          actual: `${formatCount(node.verify.median)}/s`,
          pass: node.verify.median >= TARGET_VERIFY_PER_SECOND,
        },
      ],
      notes: [
        `The full envelope path verifies ${formatCount(envelope.verify.median)} messages/s, ${formatRatio(node.verify.median / envelope.verify.median)} slower than the bare signature check: the difference is JSON parsing, schema validation and re-encoding the signed bytes.`,
      ],
    };
  },
};
