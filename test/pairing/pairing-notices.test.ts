/**
 * Pairing notices (src/pairing/notices.ts): the texts never carry a stranger's words, and
 * knocks fold into few notices — the first at once, then at most one per interval, one
 * handoff at a time — whatever the number of knocks.
 */
import { describe, expect, it } from 'vitest';
import { KnockNotices, knockNoticeDue, knockText, type KnockView, type PairingNotice } from '../../src/pairing/notices.js';
import { eventually } from '../helpers/mcp.js';

const knock = (i: number): KnockView => ({ fingerprint: `aaaa-bbbb-cccc-${String(i).padStart(4, '0')}`, code: `00000-00000-00000-${String(i).padStart(5, '0')}` });

describe('knock notice texts', () => {
  it('say nothing when no request is open, name the one request, or count several', () => {
    expect(knockText([])).toBeUndefined();
    const one = knockText([knock(1)])!;
    expect(one).toContain('fingerprint aaaa-bbbb-cccc-0001');
    expect(one).toContain('interlink-mcp pair accept aaaa-bbbb-cccc-0001');
    expect(one).toMatch(/only a person can decide/i);
    const peer = knockText([{ ...knock(2), peer: 'bob' }])!;
    expect(peer).toContain('your peer bob');
    expect(peer).toContain('asks to pair again');
    const many = knockText([knock(1), knock(2), knock(3)])!;
    expect(many).toContain('3 pairing requests are waiting for a person');
    expect(many).toContain('interlink-mcp pair list');
  });

  it('are due at once the first time, then an interval after the last', () => {
    expect(knockNoticeDue(undefined, 1_000, 60_000)).toBe(1_000);
    expect(knockNoticeDue(1_000, 2_000, 60_000)).toBe(61_000);
    expect(knockNoticeDue(1_000, 90_000, 60_000)).toBe(90_000);
  });
});

describe('KnockNotices', () => {
  it('turns 300 knocks into one notice at once and one after the interval, never two handoffs at a time', async () => {
    const open: KnockView[] = [];
    const sent: PairingNotice[] = [];
    let inFlight = 0;
    let mostInFlight = 0;
    const release: (() => void)[] = [];
    const notices = new KnockNotices(
      async () => [...open],
      async (notice) => {
        inFlight++;
        mostInFlight = Math.max(mostInFlight, inFlight);
        sent.push(notice);
        // A slow handoff (a `codex queue` process): knocks keep coming meanwhile.
        await new Promise<void>((resolve) => release.push(resolve));
        inFlight--;
      },
      Date.now,
      200,
    );
    for (let i = 0; i < 300; i++) {
      open.push(knock(i));
      notices.knock();
    }
    await eventually(async () => (sent.length === 1 ? true : undefined), 5_000, 'the first notice');
    for (let i = 300; i < 310; i++) {
      open.push(knock(i));
      notices.knock();
    }
    release.shift()!();
    await eventually(async () => (sent.length === 2 ? true : undefined), 5_000, 'the folded notice');
    release.shift()!();
    expect(sent[0]!.text).toContain(knock(0).fingerprint);
    expect(sent[1]!.text).toContain('310 pairing requests are waiting for a person');
    expect(mostInFlight).toBe(1);
    notices.close();
    notices.knock();
    expect(sent).toHaveLength(2);
  });
});
