/**
 * The frame every console page shares: navigation, the identity, a notice after an
 * action, and the one script and stylesheet (served by the console itself: no asset from
 * the network, and the Content-Security-Policy allows nothing else). The title and the
 * notice may hold names others chose (a petname, a claimed name): shown as text. Pure.
 */
import { html, shown, type Html } from './html.js';

export const PAGES = [
  { path: '/', title: 'Overview' },
  { path: '/conversations', title: 'Conversations' },
  { path: '/pairing', title: 'Pairing' },
  { path: '/recovery', title: 'Recovery' },
] as const;

export interface Frame {
  /** The path of the page (one of PAGES, or a page below one). */
  path: string;
  title: string;
  fingerprint: string;
  /** The page token each form of this page carries (guard.ts). */
  pageToken: string;
  /** What the last action did, shown once. */
  flash?: { kind: 'done' | 'failed'; text: string };
}

function section(path: string): string {
  const match = PAGES.filter((p) => p.path !== '/').find((p) => path === p.path || path.startsWith(`${p.path}/`));
  return match?.path ?? '/';
}

export function page(frame: Frame, body: Html): Html {
  const current = section(frame.path);
  return html`<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>${shown(frame.title)} · Interlink console</title>
<link rel="stylesheet" href="/assets/console.css">
<script src="/assets/console.js" defer></script>
</head>
<body>
<header>
<p class="brand">Interlink console <span class="muted">identity <code>${frame.fingerprint}</code></span></p>
<nav aria-label="Console pages"><ul>${PAGES.map((p) => html`<li><a href="${p.path}"${p.path === current ? html` aria-current="page"` : ''}>${p.title}</a></li>`)}</ul></nav>
<p class="live" id="live" role="status">Live updates: connecting…</p>
</header>
<main id="main">
${frame.flash === undefined ? '' : html`<p class="flash ${frame.flash.kind}" role="alert">${shown(frame.flash.text)}</p>`}
<h1>${shown(frame.title)}</h1>
${body}
</main>
</body>
</html>`;
}

/** A form that posts one action with the page token; `fields` are hidden inputs. */
export function actionForm(frame: Pick<Frame, 'pageToken'>, action: string, label: string, fields: Readonly<Record<string, string>>, options: { danger?: boolean } = {}): Html {
  return html`<form method="post" action="${action}" class="inline">
<input type="hidden" name="page_token" value="${frame.pageToken}">
${Object.entries(fields).map(([name, value]) => html`<input type="hidden" name="${name}" value="${value}">`)}
<button type="submit"${options.danger === true ? html` class="danger"` : ''}>${label}</button>
</form>`;
}

/** What a list says when it has nothing. */
export function empty(text: string): Html {
  return html`<p class="empty">${text}</p>`;
}
