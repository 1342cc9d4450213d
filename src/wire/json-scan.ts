/**
 * Two questions the relay asks of a frame's text before and after `JSON.parse`, answered
 * by one linear scan that never recurses: how deeply it nests (so a frame nested a
 * million deep is refused at the edge, before anything recursive touches it), and where
 * the text of one top-level member's value lies (so a payload is stored and delivered as
 * the bytes that arrived, never serialized again). DESIGN.md "The relay", "Bounded by
 * construction".
 */

/** Deepest nesting of arrays and objects a frame may have. An envelope nests two deep; a frame adds one. */
export const MAX_JSON_DEPTH = 32;

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const OPENERS = new Set([0x7b, 0x5b]); // { [
const CLOSERS = new Set([0x7d, 0x5d]); // } ]

/** The index just past the string that starts with the quote at `start`. */
function endOfString(text: string, start: number): number {
  let i = start + 1;
  while (i < text.length) {
    const c = text.charCodeAt(i);
    if (c === BACKSLASH) i += 2;
    else if (c === QUOTE) return i + 1;
    else i++;
  }
  return text.length;
}

/** Whether `text` nests arrays and objects deeper than `limit` (strings are skipped, not counted). */
export function nestsDeeperThan(text: string, limit: number): boolean {
  let depth = 0;
  for (let i = 0; i < text.length; ) {
    const c = text.charCodeAt(i);
    if (c === QUOTE) {
      i = endOfString(text, i);
      continue;
    }
    if (OPENERS.has(c) && ++depth > limit) return true;
    if (CLOSERS.has(c)) depth--;
    i++;
  }
  return false;
}

/**
 * The exact text of the value of top-level member `name` in `text`, which must be valid
 * JSON whose top level is an object (the caller parsed it). As `JSON.parse`, the last of
 * duplicate members wins, and names are compared after their escapes are decoded.
 */
export function memberText(text: string, name: string): string | undefined {
  let found: string | undefined;
  let depth = 0;
  let key: string | undefined;
  let valueStart = -1;
  for (let i = 0; i < text.length; ) {
    const c = text.charCodeAt(i);
    if (c === QUOTE) {
      const end = endOfString(text, i);
      // A string at depth 1 either names a member (before its colon) or is a member's value.
      if (depth === 1 && key === undefined) key = JSON.parse(text.slice(i, end)) as string;
      i = end;
      continue;
    }
    if (depth === 1 && c === 0x3a /* : */) valueStart = i + 1;
    else if (depth === 1 && c === 0x2c /* , */) {
      if (key === name) found = text.slice(valueStart, i).trim();
      key = undefined;
    } else if (OPENERS.has(c)) depth++;
    else if (CLOSERS.has(c)) {
      if (depth === 1 && key === name) found = text.slice(valueStart, i).trim();
      if (depth === 1) key = undefined;
      depth--;
    }
    i++;
  }
  return found;
}
