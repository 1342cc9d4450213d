/**
 * HTML the console writes, escaped by construction. `html` is a tagged template: every
 * value put into it is escaped unless it is itself `Html` made by `html` (or `raw`, for
 * the few fixed strings of this module). Text that someone else wrote (a message, a
 * claimed name, a summary) goes through `shown`: its control, bidi and line-separator
 * characters are made visible as the CLI prints them, then it is escaped. With the page's
 * Content-Security-Policy (no inline script, no inline handler), markup in a peer's text
 * is inert twice over.
 */
import { forTerminal } from '../printable.js';

const HTML_BRAND: unique symbol = Symbol('html');

/** Markup this module made; strings never become it implicitly. */
export interface Html {
  readonly [HTML_BRAND]: true;
  readonly text: string;
}

type Part = Html | string | number | undefined | null | false | readonly Part[];

function markup(text: string): Html {
  return { [HTML_BRAND]: true, text };
}

function isHtml(value: unknown): value is Html {
  return typeof value === 'object' && value !== null && HTML_BRAND in value;
}

const ESCAPES: Record<string, string> = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };

/** Text as HTML text or an attribute value (double- or single-quoted). */
export function escapeHtml(text: string): string {
  return text.replace(/[&<>"']/g, (c) => ESCAPES[c]!);
}

function render(part: Part): string {
  if (part === undefined || part === null || part === false) return '';
  if (Array.isArray(part)) return part.map(render).join('');
  if (isHtml(part)) return part.text;
  return escapeHtml(String(part));
}

export function html(strings: TemplateStringsArray, ...values: Part[]): Html {
  let text = strings[0]!;
  values.forEach((value, i) => (text += render(value) + strings[i + 1]!));
  return markup(text);
}

/** Text someone else wrote, shown as text: invisible and direction-changing characters made visible. */
export function shown(text: string): Html {
  return markup(escapeHtml(forTerminal(text)));
}

/** A time as people at a terminal see it in this project: ISO 8601, UTC, whole seconds. */
export function when(ms: number): string {
  return new Date(ms).toISOString().replace(/\.\d{3}Z$/, 'Z');
}

/** A time element: machine-readable, and shown as `when` writes it. */
export function timeTag(ms: number): Html {
  return html`<time datetime="${new Date(ms).toISOString()}">${when(ms)}</time>`;
}

/** The document as the server sends it. */
export function documentText(page: Html): string {
  return `<!doctype html>\n${page.text}`;
}
