/**
 * The setup guides pair the way the README's "Pair two machines" does: two people run
 * `pair request`, `pair accept` and `pair confirm`, comparing the verification code, and
 * `peers add` appears only after that, as the manual alternative. Every
 * `interlink-mcp pair <action>` a guide shows is an action `pair` takes.
 */
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { pairHelp } from '../../src/cli/commands/pair.js';

const GUIDES = ['README.md', 'docs/CLAUDE.md', 'codex/README.md', 'plugin/README.md'];

const read = (path: string): string => readFileSync(new URL(`../../${path}`, import.meta.url), 'utf8');

/** The actions `pair --help` lists (`interlink-mcp pair request …`, `… pair list …`). */
const ACTIONS = new Set([...pairHelp.matchAll(/interlink-mcp pair (\w+)/g)].map((m) => m[1]!));

describe('the setup guides', () => {
  it('read the actions from pair --help', () => {
    expect([...ACTIONS].sort()).toEqual(['accept', 'cancel', 'confirm', 'list', 'reject', 'request']);
  });

  for (const guide of GUIDES) {
    it(`${guide} pairs with request, accept and confirm and the code, and shows peers add only as the alternative after them`, () => {
      const text = read(guide);
      for (const action of ['request', 'accept', 'confirm']) expect(text, action).toMatch(new RegExp(`\\bpair ${action}\\b`));
      expect(text).toContain('verification code');
      const manual = text.search(/interlink-mcp\s+peers\s+add/);
      if (manual >= 0) expect(manual, 'peers add comes after pair request').toBeGreaterThan(text.indexOf('pair request'));
      const shown = [...text.matchAll(/interlink-mcp pair (\w+)/g)].map((m) => m[1]!);
      expect(shown.filter((action) => !ACTIONS.has(action))).toEqual([]);
    });
  }
});
