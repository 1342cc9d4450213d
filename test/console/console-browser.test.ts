/**
 * The console in a real browser (issue 37): Debian's Chromium driven by playwright-core
 * against a real relay, two `console` processes (two people, two identities, two state
 * roots) and two `serve` processes driven by the official MCP SDK client. Two people pair
 * by comparing the codes their pages show; a message is seen moving from `pending` to
 * `receiver_acknowledged` without a reload; hostile peer text stays text; a request
 * without the cookie, from another Origin, without the page token or to another Host name
 * is refused; a revoke takes effect in the running sessions. Every page passes axe-core
 * with no serious or critical violation. With CONSOLE_SCREENSHOTS=1 (npm run
 * screenshots) the pages are saved to docs/console/ for the README.
 */
import { mkdtemp, mkdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { AxeBuilder } from '@axe-core/playwright';
import { chromium, type Browser, type BrowserContext, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { chromiumPath, rawRequest, startConsole, type ConsoleProcess } from '../helpers/console.js';
import { eventually, startPeer, type Peer } from '../helpers/mcp.js';
import { reapAll } from '../helpers/process.js';
import { freePort, startRelay, type RelayProcess } from '../helpers/spawn-relay.js';

const executablePath = chromiumPath();
if (executablePath === undefined && process.env.CI === 'true') throw new Error('CI needs Chromium for the console tests: apt-get install chromium (.ci/run does)');
if (executablePath === undefined) console.warn('console-browser: no Chromium installed (apt-get install chromium): the browser tests are skipped');
const SHOTS = process.env.CONSOLE_SCREENSHOTS === '1' ? join(import.meta.dirname, '..', '..', 'docs', 'console') : undefined;
const STEP_MS = 45_000;

interface Person {
  console: ConsoleProcess;
  context: BrowserContext;
  page: Page;
}

describe.skipIf(executablePath === undefined)('the console in Chromium', () => {
  let root: string;
  let relay: RelayProcess;
  let relayPort: number;
  let browser: Browser;
  let alice: Person;
  let bob: Person;
  let aliceAgent: Peer;
  let bobAgent: Peer;
  const relayDb = () => join(root, 'relay-db');

  async function person(name: string): Promise<Person> {
    const c = await startConsole(root, name, relay.url);
    const context = await browser.newContext({ viewport: { width: 1200, height: 900 } });
    const page = await context.newPage();
    await page.goto(c.url);
    return { console: c, context, page };
  }

  /** Fails on any serious or critical axe-core violation of the page as it is. */
  async function accessible(page: Page): Promise<void> {
    const { violations } = await new AxeBuilder({ page }).analyze();
    const serious = violations.filter((v) => v.impact === 'serious' || v.impact === 'critical');
    expect(serious.map((v) => `${v.id}: ${v.help} (${v.nodes.map((n) => n.target.join(' ')).join(', ')})`)).toEqual([]);
  }

  async function shot(page: Page, name: string): Promise<void> {
    if (SHOTS !== undefined) await page.screenshot({ path: join(SHOTS, `${name}.png`), fullPage: true });
  }

  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), 'interlink-console-'));
    if (SHOTS !== undefined) await mkdir(SHOTS, { recursive: true });
    relayPort = await freePort();
    relay = await startRelay({ port: relayPort, db: relayDb() });
    browser = await chromium.launch({ executablePath: executablePath!, args: ['--no-sandbox'] });
    [alice, bob] = await Promise.all([person('alice'), person('bob')]);
  }, 60_000);

  afterAll(async () => {
    await aliceAgent?.close().catch(() => undefined);
    await bobAgent?.close().catch(() => undefined);
    await browser?.close();
    await reapAll();
    await rm(root, { recursive: true, force: true });
  });

  it('refuses a request without the cookie, a used link, another Host, another Origin, and an action without the page token', async () => {
    const { port, url } = alice.console;
    const host = { Host: `127.0.0.1:${port}` };
    // The browser already exchanged the one-time link.
    expect((await rawRequest(port, { path: new URL(url).pathname + new URL(url).search, headers: host })).status).toBe(401);
    expect((await rawRequest(port, { headers: host })).status).toBe(401);
    const cookies = await alice.context.cookies(alice.console.origin);
    const cookie = `${cookies[0]!.name}=${cookies[0]!.value}`;
    const page = await rawRequest(port, { headers: { ...host, Cookie: cookie } });
    expect(page.status).toBe(200);
    expect(page.headers['content-security-policy']).toContain("script-src 'self'");
    expect((await rawRequest(port, { headers: { Host: `evil.example:${port}`, Cookie: cookie } })).status).toBe(421);
    const token = /name="page_token" value="([^"]+)"/.exec((await rawRequest(port, { path: '/pairing', headers: { ...host, Cookie: cookie } })).body)![1]!;
    const form = { 'Content-Type': 'application/x-www-form-urlencoded' };
    const post = (headers: Record<string, string>, body: string) => rawRequest(port, { method: 'POST', path: '/pairing/request', headers: { ...host, ...form, ...headers }, body });
    expect((await post({ Cookie: cookie, Origin: 'http://evil.example' }, `page_token=${token}&target=x`)).status).toBe(403);
    expect((await post({ Cookie: cookie }, `page_token=${token}&target=x`)).status).toBe(403);
    expect((await post({ Cookie: cookie, Origin: alice.console.origin }, 'target=x')).status).toBe(403);
    expect((await post({ Origin: alice.console.origin }, `page_token=${token}&target=x`)).status).toBe(401);
    // With all of them, the same request is an action (refused by pairing: no such target), answered with a redirect.
    expect((await post({ Cookie: cookie, Origin: alice.console.origin }, `page_token=${token}&target=x`)).status).toBe(303);
  });

  it('pairs two identities through two consoles, the people comparing the codes their pages show', async () => {
    const bobKey = /public key <code class="key">([A-Za-z0-9_-]{43})<\/code>/.exec(await bob.page.content())![1]!;
    await alice.page.getByRole('link', { name: 'Pairing', exact: true }).click();
    await bob.page.getByRole('link', { name: 'Pairing', exact: true }).click();
    await alice.page.getByLabel(/Whom/).fill(bobKey);
    await alice.page.getByLabel(/Petname for them/).fill('bob');
    await alice.page.getByRole('button', { name: 'Ask to pair' }).click();
    const asked = await alice.page.locator('.flash').textContent({ timeout: STEP_MS });
    expect(asked).toMatch(/^Asked/);
    const aliceCode = /Verification code (\S+?):/.exec(asked ?? '')?.[1];
    expect(aliceCode).toBeDefined();
    // Bob's page shows the request without a reload.
    const incoming = bob.page.locator('.requests li', { hasText: 'claims to be' });
    await incoming.waitFor({ timeout: STEP_MS });
    expect(await incoming.locator('.code').textContent()).toBe(aliceCode);
    await shot(bob.page, 'pairing');
    await accessible(bob.page);
    await incoming.getByLabel('Petname').fill('alice');
    await incoming.getByRole('button', { name: /Accept/ }).click();
    expect(await bob.page.locator('.flash.done').textContent()).toContain('alice');
    // Alice's request completes when bob's confirmation arrives; her page lists bob as a peer.
    await alice.page.locator('table', { hasText: 'Peers' }).getByRole('rowheader', { name: 'bob' }).waitFor({ timeout: STEP_MS });
  });

  it('shows a message move live from pending to receiver_acknowledged', async () => {
    aliceAgent = await startPeer({ root, name: 'alice', session: 'a1', relays: relay.url });
    bobAgent = await startPeer({ root, name: 'bob', session: 'b1', relays: relay.url });
    await eventually(async () => ((await aliceAgent.call<{ identities: unknown[] }>('discover', { peer: 'bob' })).identities.length > 0 ? true : undefined), STEP_MS, 'bob on the roster');
    await aliceAgent.call('set_summary', { summary: 'Reviewing the parser change' });
    await relay.child.kill('SIGTERM');
    const sent = await aliceAgent.call<{ msg_id: string; state: string }>('send_message', { to: 'bob', session: 'b1', text: 'Please review the parser change.' });
    expect(sent.state).toBe('pending');
    const page = alice.page;
    await page.goto(`${alice.console.origin}/conversations/bob`);
    await page.evaluate(() => ((globalThis as unknown as { marker: number }).marker = 1));
    const state = page.locator(`[data-msg-id="${sent.msg_id}"] .current .state`);
    await state.filter({ hasText: /^pending$/ }).waitFor({ timeout: STEP_MS });
    relay = await startRelay({ port: relayPort, db: relayDb() });
    const got = await eventually(async () => {
      const { messages } = await bobAgent.call<{ messages: { sender: string; msg_id: string }[] }>('receive_messages');
      return messages.find((m) => m.msg_id === sent.msg_id);
    }, 60_000, 'bob receives the message');
    await bobAgent.call('acknowledge_messages', { messages: [{ sender: got.sender, msg_id: got.msg_id }] });
    await state.filter({ hasText: /^receiver_acknowledged$/ }).waitFor({ timeout: 60_000 });
    // The same document all along: the page followed the states, nobody reloaded it.
    expect(await page.evaluate(() => (globalThis as unknown as { marker?: number }).marker)).toBe(1);
    const history = await page.locator(`[data-msg-id="${sent.msg_id}"] .history li .state`).allTextContents();
    expect(history[0]).toBe('pending');
    expect(history).toContain('bus_accepted');
    expect(history.at(-1)).toBe('receiver_acknowledged');
  }, 180_000);

  it("shows a peer's hostile text as inert text, control and bidi characters made visible", async () => {
    const hostile = 'hi <script>window.pwned = 1</script><img src=x onerror="window.pwned = 2"> \u202Egnp.exe\u200B end';
    const { msg_id } = await bobAgent.call<{ msg_id: string }>('send_message', { to: 'alice', session: 'a1', text: hostile });
    const page = alice.page;
    await page.goto(`${alice.console.origin}/conversations/bob`);
    const text = page.locator(`[data-msg-id="${msg_id}"] pre.text`);
    await text.waitFor({ timeout: STEP_MS });
    const shown = await text.textContent();
    expect(shown).toContain('<script>window.pwned = 1</script><img src=x onerror="window.pwned = 2">');
    expect(shown).toContain('\\u{202e}gnp.exe');
    expect(shown).not.toContain('\u202E');
    expect(await page.locator('main img, main script').count()).toBe(0);
    expect(await page.evaluate(() => (globalThis as unknown as { pwned?: number }).pwned)).toBeUndefined();
    await shot(page, 'conversation');
    await accessible(page);
  });

  it("shows the panel of a message sent to several, following each recipient's answer live", async () => {
    const sent = await aliceAgent.call<{ group_id: string; recipients: { to: string; msg_id: string }[] }>('send_message', { to: ['bob'], text: 'Run the release checklist.', task_id: 'release-7' });
    const page = alice.page;
    await page.goto(`${alice.console.origin}/conversations`);
    await page.getByRole('link', { name: 'Run the release checklist.' }).click();
    const outcome = page.locator('table[aria-label="Recipients"] tr', { hasText: 'bob' }).locator('.outcome');
    await outcome.filter({ hasText: /^waiting$/ }).waitFor({ timeout: STEP_MS });
    await page.evaluate(() => ((globalThis as unknown as { marker: number }).marker = 2));
    const copy = await eventually(async () => {
      const { messages } = await bobAgent.call<{ messages: { msg_id: string; group_id?: string }[] }>('receive_messages');
      return messages.find((m) => m.group_id === sent.group_id);
    }, STEP_MS, 'bob gets his copy');
    expect(copy.msg_id).toBe(sent.recipients[0]!.msg_id);
    await bobAgent.call('send_message', { to: 'alice', session: 'a1', text: 'Checklist done <b>all green</b>', task_id: 'release-7', status: 'result', in_reply_to: copy.msg_id });
    await outcome.filter({ hasText: /^answered$/ }).waitFor({ timeout: STEP_MS });
    expect(await page.locator('.said pre.text').first().textContent()).toBe('Checklist done <b>all green</b>');
    expect(await page.evaluate(() => (globalThis as unknown as { marker?: number }).marker)).toBe(2);
    await shot(page, 'group');
    await accessible(page);
  });

  it('passes the accessibility check on the overview, recovery and conversations pages', async () => {
    // The recovery page is pictured after the revoke, when it holds a refusal.
    for (const [path, name] of [['/', 'overview'], ['/recovery', undefined], ['/conversations', 'conversations']] as const) {
      await alice.page.goto(`${alice.console.origin}${path}`);
      await alice.page.locator('h1').waitFor();
      if (name !== undefined) await shot(alice.page, name);
      await accessible(alice.page);
    }
  });

  it('revokes a peer after asking, and the running sessions stop admitting it at once', async () => {
    const page = alice.page;
    await page.goto(`${alice.console.origin}/pairing`);
    await page.getByRole('link', { name: 'Revoke…' }).click();
    await page.getByRole('button', { name: 'Revoke this peer' }).click();
    expect(await page.locator('.flash.done').textContent()).toContain('Revoked bob');
    expect(await aliceAgent.fail('send_message', { to: 'bob', text: 'still there?' })).toMatchObject({ code: 'unknown_peer' });
    const { msg_id } = await bobAgent.call<{ msg_id: string }>('send_message', { to: 'alice', session: 'a1', text: 'after the revoke' });
    await page.goto(`${alice.console.origin}/recovery`);
    await page.locator('#rejected ~ table, section:has(#rejected) table').locator('tr', { hasText: msg_id }).waitFor({ timeout: STEP_MS });
    expect(await page.locator('section:has(#rejected)').textContent()).toContain('not_allowlisted');
    await shot(page, 'recovery');
    await accessible(page);
    const { messages } = await aliceAgent.call<{ messages: { msg_id: string }[] }>('receive_messages');
    expect(messages.map((m) => m.msg_id)).not.toContain(msg_id);
  });
});
