/**
 * Shared pieces of the seeded fuzz tests (`*.fuzz.test.ts`, `npm run fuzz`): how many
 * cases and which seed, and generators of hostile input — text with control and bidi
 * characters, lone surrogates and path-like names; JSON nested far past any bound, huge
 * numbers, prototype keys; raw bytes that are not UTF-8; truncations and edits of a valid
 * document.
 *
 * `npm test` runs each fuzz file with its small default count and the fixed seed below;
 * `npm run fuzz` sets FUZZ_RUNS=100000 and a fresh FUZZ_SEED, printed in each test's name.
 * fast-check prints the seed and the shrunk case of a failure; rerun it with
 * FUZZ_SEED=<seed> FUZZ_RUNS=<n> npx vitest run <file>.
 */
import fc from 'fast-check';

/** The seed of `npm test`'s runs, so that a failure there is the same on every machine. */
export const DEFAULT_FUZZ_SEED = 20261202;

/** Cases per property: FUZZ_RUNS, or the file's own default (what `npm test` runs). */
export function fuzzRuns(fallback: number): number {
  const runs = Number(process.env.FUZZ_RUNS ?? fallback);
  if (!Number.isSafeInteger(runs) || runs < 1) throw new Error(`FUZZ_RUNS must be a positive integer, got ${process.env.FUZZ_RUNS}`);
  return runs;
}

/** A share of FUZZ_RUNS for a property whose cases cost a process round trip or a file. */
export function fuzzShare(fallback: number, divisor: number): number {
  return process.env.FUZZ_RUNS === undefined ? fallback : Math.max(fallback, Math.ceil(fuzzRuns(fallback) / divisor));
}

export function fuzzSeed(): number {
  const seed = Number(process.env.FUZZ_SEED ?? DEFAULT_FUZZ_SEED);
  if (!Number.isSafeInteger(seed)) throw new Error(`FUZZ_SEED must be an integer, got ${process.env.FUZZ_SEED}`);
  return seed;
}

/**
 * A test's time limit for `runs` cases of about `msPerCase` each on a quiet machine: ten
 * times that (a loaded machine, a slow CI runner), never under two minutes. vitest's
 * default 60 s would stop a 100,000-case run halfway and leave it running beside the next test.
 */
export function fuzzTimeout(runs: number, msPerCase: number): number {
  return Math.max(120_000, Math.ceil(runs * msPerCase * 10));
}

/** `(seed S, N cases)`, for a test's name: what to rerun it with. */
export function fuzzLabel(runs: number): string {
  return `(seed ${fuzzSeed()}, ${runs.toLocaleString('en')} cases)`;
}

/** fast-check parameters for a run of `runs` cases under the seed; no time limit per case (the test's own bounds it). */
export function fuzzParameters(runs: number): fc.Parameters<unknown> {
  return { seed: fuzzSeed(), numRuns: runs, endOnFailure: true };
}

/** Characters that have fooled parsers and people: controls, bidi overrides, zero-width, BOM, lone surrogates. */
const NASTY_CHARS = ['\u0000', '\u0007', '\b', '\t', '\n', '\r', '\u001b', '\u007f', '\u0085', '\u200b', '\u200d', '\u200e', '\u200f', '\u202a', '\u202e', '\u2066', '\u2069', '\u2028', '\u2029', '\ufeff', '\ufffd', '\ud800', '\udfff', '\ud83d\ude00', 'é', 'e\u0301', '\uff0f', '\u2215'];

/** Names that try to leave a folder or mean something special to a file system or a shell. */
export const PATH_LIKE = [
  '',
  '.',
  '..',
  '../',
  '../../../../../../tmp/escaped',
  '/etc/passwd',
  '/tmp/escaped',
  'a/b',
  'a\\b',
  '..\\..\\escaped',
  'C:\\Windows',
  '~',
  '~/.ssh/id_ed25519',
  '$HOME',
  '`id`',
  '$(id)',
  'con',
  'NUL',
  'aux.txt',
  '.git',
  '.interlink',
  'x'.repeat(300),
  'name\u0000.json',
  '-rf',
  '--help',
  'file:///etc/passwd',
  '%2e%2e%2f',
  '\u202eevil',
];

export const nastyChar = fc.constantFrom(...NASTY_CHARS);

/** Strings a person would not type: mostly short, with hostile characters and path-like names mixed in. */
export const hostileString: fc.Arbitrary<string> = fc.oneof(
  { weight: 4, arbitrary: fc.string({ maxLength: 24 }) },
  { weight: 3, arbitrary: fc.array(fc.oneof(nastyChar, fc.string({ maxLength: 4 })), { maxLength: 12 }).map((parts) => parts.join('')) },
  { weight: 2, arbitrary: fc.constantFrom(...PATH_LIKE) },
  { weight: 2, arbitrary: fc.string({ unit: 'binary', maxLength: 40 }) },
  { weight: 1, arbitrary: fc.string({ unit: 'grapheme', maxLength: 16 }) },
  { weight: 1, arbitrary: fc.integer({ min: 1_000, max: 300_000 }).map((n) => 'x'.repeat(n)) },
);

/** Numbers past every bound a schema might forget: negative, fractional, huge, not safe integers. */
export const hostileNumber = fc.oneof(
  fc.integer(),
  fc.double(),
  fc.constantFrom(0, -0, -1, 0.5, 2 ** 53, 2 ** 53 + 2, -(2 ** 63), 1e308, Number.MAX_SAFE_INTEGER, 4_102_444_800_000),
);

/** Any JSON value, with hostile strings and numbers in it and prototype-polluting keys. */
export const hostileValue: fc.Arbitrary<unknown> = fc.letrec((tie) => ({
  value: fc.oneof(
    { depthSize: 'small', withCrossShrink: true },
    hostileString,
    hostileNumber,
    fc.boolean(),
    fc.constant(null),
    fc.array(tie('value'), { maxLength: 4 }),
    fc.dictionary(fc.oneof(hostileString, fc.constantFrom('__proto__', 'constructor', 'prototype', 'v', 'type', 'text')), tie('value'), { maxKeys: 4 }),
  ),
})).value;

/** JSON text nested `depth` deep in arrays, objects or both. */
export function nestedJson(depth: number, kind: 'array' | 'object' | 'mixed'): string {
  if (kind === 'array') return `${'['.repeat(depth)}${']'.repeat(depth)}`;
  if (kind === 'object') return `${'{"a":'.repeat(depth)}1${'}'.repeat(depth)}`;
  const half = Math.ceil(depth / 2);
  return `${'[{"a":'.repeat(half)}1${'}]'.repeat(half)}`;
}

export const deepJson = fc
  .tuple(
    fc.oneof({ weight: 10, arbitrary: fc.integer({ min: 1, max: 200 }) }, { weight: 3, arbitrary: fc.integer({ min: 200, max: 20_000 }) }, { weight: 1, arbitrary: fc.constant(200_000) }),
    fc.constantFrom('array' as const, 'object' as const, 'mixed' as const),
  )
  .map(([depth, kind]) => nestedJson(depth, kind));

/**
 * Edits of a valid JSON document, as a damaged disk, a bad hand edit or an attacker makes
 * them: one member replaced by a hostile value, removed, or added; an array element
 * replaced; the document wrapped. Returns the edited value (the input is not changed).
 */
export function editedJson(valid: unknown): fc.Arbitrary<unknown> {
  const paths = pathsOf(valid);
  return fc.tuple(fc.constantFrom(...paths), fc.constantFrom('replace', 'delete', 'add', 'wrap') , hostileValue, hostileString).map(([path, how, value, key]) => {
    const copy: unknown = structuredClone(valid);
    if (path.length === 0) return how === 'wrap' ? [copy] : value;
    const parent = path.slice(0, -1).reduce<unknown>((node, step) => (node as Record<string | number, unknown>)[step], copy) as Record<string | number, unknown>;
    const last = path[path.length - 1]!;
    if (how === 'replace') parent[last] = value;
    else if (how === 'delete') {
      if (Array.isArray(parent)) parent.splice(Number(last), 1);
      else delete parent[last];
    } else if (how === 'add') {
      if (Array.isArray(parent)) parent.push(value);
      else parent[key] = value;
    } else parent[last] = [parent[last]];
    return copy;
  });
}

function pathsOf(value: unknown, prefix: (string | number)[] = []): (string | number)[][] {
  const here = [prefix];
  if (Array.isArray(value)) return [...here, ...value.flatMap((item, i) => pathsOf(item, [...prefix, i]))];
  if (typeof value === 'object' && value !== null) return [...here, ...Object.entries(value).flatMap(([k, v]) => pathsOf(v, [...prefix, k]))];
  return here;
}

/**
 * Bytes for a file or a field where text is expected: edits of a valid text (cut short,
 * a flipped bit, a byte dropped or doubled, a line repeated), JSON values and nesting,
 * random bytes (mostly not UTF-8), and rarely something large.
 */
export function hostileBytes(valid: string): fc.Arbitrary<Buffer> {
  const bytes = Buffer.from(valid);
  const at = fc.nat({ max: Math.max(0, bytes.length - 1) });
  return fc.oneof(
    { weight: 4, arbitrary: at.map((n) => bytes.subarray(0, n)) },
    { weight: 3, arbitrary: fc.tuple(at, fc.integer({ min: 0, max: 7 })).map(([n, bit]) => flipBit(bytes, n, bit)) },
    { weight: 1, arbitrary: at.map((n) => Buffer.concat([bytes.subarray(0, n), bytes.subarray(n + 1)])) },
    { weight: 1, arbitrary: at.map((n) => Buffer.concat([bytes.subarray(0, n + 1), bytes.subarray(n)])) },
    { weight: 1, arbitrary: fc.constant(Buffer.concat([bytes, bytes])) },
    { weight: 2, arbitrary: editedJsonText(valid).map((text) => Buffer.from(text)) },
    { weight: 2, arbitrary: hostileValue.map((value) => Buffer.from(JSON.stringify(value) ?? 'undefined')) },
    { weight: 1, arbitrary: deepJson.map((text) => Buffer.from(text)) },
    { weight: 2, arbitrary: fc.uint8Array({ maxLength: 256 }).map((b) => Buffer.from(b)) },
    { weight: 1, arbitrary: fc.constantFrom(Buffer.alloc(0), Buffer.from('\n'), Buffer.from('null'), Buffer.from('{}'), Buffer.from('[]'), Buffer.from('\ufeff{}'), Buffer.from([0xff, 0xfe, 0x00])) },
  );
}

/** One JSON-lines or JSON document edited as a value when it parses, or unchanged when it does not. */
function editedJsonText(valid: string): fc.Arbitrary<string> {
  const lines = valid.split('\n');
  const parsed = lines.map((line) => {
    try {
      return { ok: true as const, value: JSON.parse(line) as unknown };
    } catch {
      return { ok: false as const };
    }
  });
  const whole = (() => {
    try {
      return { ok: true as const, value: JSON.parse(valid) as unknown };
    } catch {
      return { ok: false as const };
    }
  })();
  if (whole.ok) return editedJson(whole.value).map((value) => JSON.stringify(value) ?? 'null');
  const candidates = parsed.flatMap((p, i) => (p.ok ? [i] : []));
  if (candidates.length === 0) return fc.constant(valid);
  return fc.constantFrom(...candidates).chain((i) =>
    editedJson((parsed[i] as { value: unknown }).value).map((value) => [...lines.slice(0, i), JSON.stringify(value) ?? 'null', ...lines.slice(i + 1)].join('\n')),
  );
}

export function flipBit(bytes: Buffer, index: number, bit: number): Buffer {
  const copy = Buffer.from(bytes);
  if (copy.length > 0) copy[index % copy.length] = copy[index % copy.length]! ^ (1 << bit);
  return copy;
}
