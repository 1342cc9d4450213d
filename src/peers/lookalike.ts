/**
 * Petnames that look the same on screen. A petname is how a person (and an agent) tells
 * peers apart in every notice and listing, so a second petname that reads like the first
 * ("bob" and "Bob", "аlice" with a Cyrillic а) would let a message from one pass as the
 * other's. Two petnames with the same skeleton are refused (peers.ts).
 *
 * The skeleton is a deliberately small cousin of Unicode TR39's confusable skeleton:
 * compatibility forms folded (NFKC: full-width letters, ligatures, superscripts), case
 * folded, every Cyrillic and Greek letter that is drawn like a Latin one mapped to it,
 * the digits 0 and 1 to o and l, the dashes and spaces to one of each, invisible
 * characters dropped (a petname stored before they were refused may hold one), and NFC again.
 * Accents are kept: "josé" and "jose" are two names a person reads as two. Capital I and
 * small l (alike in many sans-serif fonts) are kept apart: folding one into the other
 * would refuse "ali" beside "all". The full TR39
 * table (thousands of entries, most for scripts petnames rarely use) is left out on purpose.
 */

/** Look-alikes of Latin letters, after case folding (so only lower case is listed). */
const LOOKALIKES: Readonly<Record<string, string>> = {
  // Cyrillic
  'а': 'a', 'в': 'b', 'е': 'e', 'ё': 'ë', 'һ': 'h', 'і': 'i', 'ї': 'ï', 'ј': 'j', 'к': 'k', 'ӏ': 'l', 'м': 'm',
  'о': 'o', 'р': 'p', 'ԛ': 'q', 'г': 'r', 'ѕ': 's', 'т': 't', 'у': 'y', 'ԝ': 'w', 'х': 'x', 'с': 'c', 'ү': 'y',
  // Greek
  'α': 'a', 'β': 'b', 'ε': 'e', 'η': 'n', 'ι': 'i', 'κ': 'k', 'ν': 'v', 'ο': 'o', 'ρ': 'p', 'τ': 't', 'υ': 'u', 'χ': 'x',
  'γ': 'y', 'ω': 'w', 'ς': 'c', 'σ': 'o',
  // Latin letters drawn like others
  'ı': 'i', 'ȷ': 'j', 'ɡ': 'g', 'ɑ': 'a', 'ℓ': 'l',
  // digits read as letters
  '0': 'o', '1': 'l',
  // dashes and spaces
  '‐': '-', '‑': '-', '‒': '-', '–': '-', '—': '-', '−': '-', '_': '-',
};

/** What a petname looks like: equal skeletons are names a reader cannot tell apart. */
export function skeleton(name: string): string {
  const folded = name.replace(/[\p{Cc}\p{Cf}\p{Zl}\p{Zp}]/gu, '').normalize('NFKC').toLowerCase().normalize('NFKC');
  let out = '';
  for (const char of folded) out += /\p{Zs}/u.test(char) ? ' ' : (LOOKALIKES[char] ?? char);
  return out.normalize('NFC');
}

/** The existing petname (other than `name` itself) that looks the same as `name`, if any. */
export function lookalikeOf(name: string, existing: Iterable<string>): string | undefined {
  const mine = skeleton(name);
  for (const other of existing) if (other !== name && skeleton(other) === mine) return other;
  return undefined;
}
