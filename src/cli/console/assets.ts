/**
 * The console's one stylesheet and one script, served from memory under /assets/ (no
 * build step, no file to lose, nothing from the network). The script does one thing:
 * when the server says something changed (server-sent events on /events), it fetches the
 * same page again and swaps its <main> for the new one. The markup it swaps in was
 * escaped by the server (html.ts), is parsed by DOMParser (which runs no script), and the
 * Content-Security-Policy allows no inline script or handler anyway.
 */
import { createHash } from 'node:crypto';

const SCRIPT = `'use strict';
(function () {
  var live = document.getElementById('live');
  var busy = false;
  var again = false;
  var waitingForBlur = false;
  function say(text) { if (live) live.textContent = text; }
  function typing() {
    var el = document.activeElement;
    var main = document.getElementById('main');
    return !!(el && main && main.contains(el) && (el.tagName === 'INPUT' || el.tagName === 'TEXTAREA'));
  }
  function refresh() {
    if (busy) { again = true; return; }
    if (typing()) {
      if (!waitingForBlur) {
        waitingForBlur = true;
        document.addEventListener('focusout', function () { waitingForBlur = false; setTimeout(refresh, 0); }, { once: true });
      }
      return;
    }
    busy = true;
    fetch(location.href, { credentials: 'same-origin', headers: { 'X-Console-Refresh': '1' } })
      .then(function (res) { return res.ok ? res.text() : Promise.reject(new Error('HTTP ' + res.status)); })
      .then(function (text) {
        var next = new DOMParser().parseFromString(text, 'text/html').getElementById('main');
        var main = document.getElementById('main');
        if (next && main) main.replaceWith(document.importNode(next, true));
        document.body.dataset.refreshed = String(Date.now());
      })
      .catch(function () { say('Live updates: the console did not answer; reload the page'); })
      .then(function () {
        busy = false;
        if (again) { again = false; refresh(); }
      });
  }
  if (typeof EventSource !== 'function') { say('Live updates: not supported by this browser; reload to see changes'); return; }
  var events = new EventSource('/events');
  events.addEventListener('open', function () { say('Live updates: on'); document.body.dataset.live = 'on'; });
  events.addEventListener('error', function () { say('Live updates: reconnecting…'); document.body.dataset.live = 'off'; });
  events.addEventListener('changed', refresh);
})();
`;

const STYLE = `:root { color-scheme: light; --fg: #1b1b1b; --muted: #555; --line: #c8c8c8; --accent: #0b5cad; --warn: #8a1c1c; --bg: #fff; --soft: #f3f5f8; }
* { box-sizing: border-box; }
body { margin: 0; font: 15px/1.5 system-ui, -apple-system, "Segoe UI", sans-serif; color: var(--fg); background: var(--bg); }
header { background: var(--soft); border-bottom: 1px solid var(--line); padding: 0.5rem 1rem; display: flex; flex-wrap: wrap; gap: 0.5rem 1.5rem; align-items: center; }
header p { margin: 0; }
.brand { font-weight: 600; }
nav ul { list-style: none; display: flex; gap: 1rem; margin: 0; padding: 0; }
nav a { color: var(--accent); text-decoration: none; padding: 0.2rem 0; }
nav a[aria-current="page"] { border-bottom: 3px solid var(--accent); font-weight: 600; }
.live { margin-left: auto; color: var(--muted); font-size: 0.9em; }
main { padding: 1rem; max-width: 72rem; }
h1 { font-size: 1.5rem; margin: 0.5rem 0 1rem; }
h2 { font-size: 1.15rem; margin: 1.5rem 0 0.5rem; }
a { color: var(--accent); }
code, pre { font-family: ui-monospace, "DejaVu Sans Mono", monospace; font-size: 0.92em; }
.key { word-break: break-all; }
.muted { color: var(--muted); font-weight: normal; }
table { border-collapse: collapse; width: 100%; margin: 0.5rem 0; }
caption { text-align: left; font-weight: 600; padding: 0.25rem 0; }
th, td { text-align: left; vertical-align: top; border-bottom: 1px solid var(--line); padding: 0.35rem 0.5rem; }
.counts { list-style: none; padding: 0; display: grid; grid-template-columns: repeat(auto-fill, minmax(16rem, 1fr)); gap: 0.5rem; }
.counts li { border: 1px solid var(--line); border-radius: 6px; padding: 0.5rem; }
.counts li.attention { border-color: var(--warn); background: #fff4f4; }
.counts a { text-decoration: none; color: var(--fg); }
.counts strong { font-size: 1.3em; margin-right: 0.3rem; }
.messages, .requests, .items, .peers { list-style: none; padding: 0; }
.message, .requests > li, .items > li { border: 1px solid var(--line); border-radius: 6px; padding: 0.5rem 0.75rem; margin: 0.5rem 0; }
.message.sent { border-left: 4px solid var(--accent); margin-left: 2rem; }
.message.received { border-left: 4px solid #2d6a2d; margin-right: 2rem; }
.meta, .current { margin: 0.2rem 0; }
pre.text { white-space: pre-wrap; overflow-wrap: anywhere; background: var(--soft); padding: 0.5rem; border-radius: 4px; margin: 0.3rem 0; }
.history { margin: 0.2rem 0; padding-left: 1.25rem; color: var(--muted); font-size: 0.92em; }
.state { font-family: ui-monospace, "DejaVu Sans Mono", monospace; }
.code { font-family: ui-monospace, "DejaVu Sans Mono", monospace; font-size: 1.2em; letter-spacing: 0.08em; }
form.inline { display: inline-block; margin: 0.25rem 0.5rem 0.25rem 0; }
form.stacked { display: grid; gap: 0.5rem; max-width: 32rem; margin: 1rem 0; }
label { display: inline-flex; flex-direction: column; gap: 0.15rem; }
input { font: inherit; padding: 0.3rem 0.4rem; border: 1px solid #767676; border-radius: 4px; }
button { font: inherit; padding: 0.3rem 0.8rem; border-radius: 4px; border: 1px solid var(--accent); background: var(--accent); color: #fff; cursor: pointer; }
button.danger { background: #fff; color: var(--warn); border-color: var(--warn); }
button:focus-visible, a:focus-visible, input:focus-visible { outline: 3px solid #f5a623; outline-offset: 2px; }
.flash { padding: 0.5rem 0.75rem; border-radius: 6px; }
.flash.done { background: #eef7ee; border: 1px solid #2d6a2d; }
.flash.failed { background: #fff4f4; border: 1px solid var(--warn); }
.empty { color: var(--muted); }
.visually-hidden { position: absolute; width: 1px; height: 1px; overflow: hidden; clip: rect(0 0 0 0); white-space: nowrap; }
`;

export interface Asset {
  type: string;
  body: string;
  etag: string;
}

function asset(type: string, body: string): Asset {
  return { type, body, etag: `"${createHash('sha256').update(body).digest('base64url').slice(0, 16)}"` };
}

export const ASSETS: ReadonlyMap<string, Asset> = new Map([
  ['/assets/console.js', asset('text/javascript; charset=utf-8', SCRIPT)],
  ['/assets/console.css', asset('text/css; charset=utf-8', STYLE)],
]);
