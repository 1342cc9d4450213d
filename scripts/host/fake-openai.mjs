#!/usr/bin/env node
/**
 * A scripted stand-in for the OpenAI Responses API, for driving the real `codex` CLI
 * offline in host tests. It listens on 127.0.0.1 only, prints `LISTENING <port>` on
 * stdout, and appends one JSON line per request to the log file ({t, method, url,
 * headers, body, reply}), so a test can read what the model was shown and what it did.
 *
 *   node scripts/host/fake-openai.mjs [--port N] [--log FILE]
 *
 * Codex POSTs `{base_url}/responses` with `stream: true` and reads server-sent events.
 * MCP tools are offered as namespaces (`{type: "namespace", name: "mcp__<server>",
 * tools: [...]}`), and a call must name both the tool and its namespace.
 *
 * The reply is a pure function of the request's last input item:
 *   - the output of a `receive_messages` call → an `acknowledge_messages` call with the
 *     receipts from that output;
 *   - the output of an `acknowledge_messages` call → the text `DONE`;
 *   - any other call output → the text `TOOL_RESULT_SEEN: <output>`;
 *   - a user message naming `receive_messages` and a `notification_id` (an Interlink
 *     notice) → a `receive_messages` call;
 *   - a user message containing `CALL_TOOL:<name>` → a call of that offered tool with {};
 *   - anything else → the text `FAKE_REPLY: <first 60 characters of that text>`.
 */
import { appendFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { parseArgs } from 'node:util';
import * as zlib from 'node:zlib';

const { values: options } = parseArgs({
  options: { port: { type: 'string', default: '0' }, log: { type: 'string' } },
});

let counter = 0;

function log(entry) {
  if (options.log !== undefined) appendFileSync(options.log, JSON.stringify({ t: Date.now(), ...entry }) + '\n');
}

function decodeBody(raw, encoding) {
  switch ((encoding ?? '').trim()) {
    case 'gzip':
      return zlib.gunzipSync(raw);
    case 'deflate':
      return zlib.inflateSync(raw);
    case 'br':
      return zlib.brotliDecompressSync(raw);
    case 'zstd':
      // node:zlib has zstd from Node 22.15 on; Codex sends plain bodies unless asked to compress.
      if (typeof zlib.zstdDecompressSync !== 'function') throw new Error('zstd request bodies need Node ≥ 22.15');
      return zlib.zstdDecompressSync(raw);
    default:
      return raw;
  }
}

/** Every offered function tool as {name, namespace?}, namespaces flattened. */
function offeredTools(body) {
  const found = [];
  for (const tool of Array.isArray(body.tools) ? body.tools : []) {
    if (tool?.type === 'namespace' && Array.isArray(tool.tools)) {
      for (const inner of tool.tools) if (typeof inner?.name === 'string') found.push({ name: inner.name, namespace: tool.name });
    } else if (typeof tool?.name === 'string') {
      found.push({ name: tool.name });
    }
  }
  return found;
}

function offered(body, name) {
  return offeredTools(body).find((t) => t.name === name || `${t.namespace}__${t.name}` === name);
}

function textOf(content) {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return '';
  return content.map((part) => (typeof part?.text === 'string' ? part.text : '')).join('\n');
}

/** Receipts from a receive_messages output: `{messages: [{receipt: {sender, msg_id}}]}`. */
function receiptsFrom(outputText) {
  for (const candidate of outputText.split('\n')) {
    let parsed;
    try {
      parsed = JSON.parse(candidate);
    } catch {
      continue;
    }
    const messages = Array.isArray(parsed?.messages) ? parsed.messages : [];
    return messages
      .map((m) => m?.receipt)
      .filter((r) => typeof r?.sender === 'string' && typeof r?.msg_id === 'string')
      .map((r) => ({ sender: r.sender, msg_id: r.msg_id }));
  }
  return [];
}

const NOTIFICATION_ID = /notification_id["'\s:=]*([A-Za-z0-9._:-]+)/;
const CALL_TOOL = /CALL_TOOL:([A-Za-z0-9_]+)/;

function call(tool, args) {
  return { type: 'call', name: tool.name, namespace: tool.namespace, args };
}

/** Decides the reply: `{rule, items: [{type: 'text', text} | {type: 'call', name, namespace?, args}]}`. */
function decide(body) {
  const input = Array.isArray(body.input) ? body.input : [];
  const last = input.at(-1);
  if (last?.type === 'function_call_output') {
    const made = input.find((item) => item?.type === 'function_call' && item.call_id === last.call_id);
    const outputText = textOf(last.output);
    if (made?.name === 'receive_messages') {
      const receipts = receiptsFrom(outputText);
      const ack = offered(body, 'acknowledge_messages');
      if (receipts.length > 0 && ack !== undefined) return { rule: 'acknowledge', items: [call(ack, { messages: receipts })] };
      return { rule: 'nothing_to_acknowledge', items: [{ type: 'text', text: `NOTHING_TO_ACKNOWLEDGE: ${outputText.slice(0, 200)}` }] };
    }
    if (made?.name === 'acknowledge_messages') return { rule: 'done', items: [{ type: 'text', text: 'DONE' }] };
    return { rule: 'tool_result', items: [{ type: 'text', text: `TOOL_RESULT_SEEN: ${outputText.slice(0, 300)}` }] };
  }
  const lastUser = [...input].reverse().find((item) => item?.role === 'user');
  const text = textOf(lastUser?.content);
  const receive = offered(body, 'receive_messages');
  if (receive !== undefined && text.includes('receive_messages') && NOTIFICATION_ID.test(text)) {
    const notificationId = NOTIFICATION_ID.exec(text)?.[1];
    return { rule: 'receive', items: [call(receive, notificationId !== undefined ? { notification_id: notificationId } : {})] };
  }
  const wanted = CALL_TOOL.exec(text)?.[1];
  const tool = wanted !== undefined ? offered(body, wanted) : undefined;
  if (tool !== undefined) return { rule: 'call_tool', items: [call(tool, {})] };
  return { rule: 'reply', items: [{ type: 'text', text: `FAKE_REPLY: ${text.slice(0, 60)}` }] };
}

function outputItem(item) {
  const id = `item_fake_${++counter}`;
  if (item.type === 'call') {
    return {
      type: 'function_call',
      id,
      call_id: `call_fake_${counter}`,
      name: item.name,
      ...(item.namespace !== undefined && { namespace: item.namespace }),
      arguments: JSON.stringify(item.args),
      status: 'completed',
    };
  }
  return { type: 'message', id, role: 'assistant', status: 'completed', content: [{ type: 'output_text', text: item.text, annotations: [] }] };
}

const USAGE = { input_tokens: 10, input_tokens_details: { cached_tokens: 0 }, output_tokens: 5, output_tokens_details: { reasoning_tokens: 0 }, total_tokens: 15 };

/** response.created → per item added/done → response.completed. */
function sseEvents(model, items) {
  const id = `resp_fake_${++counter}`;
  const base = { id, object: 'response', created_at: Math.floor(Date.now() / 1000), model };
  const events = [
    ['response.created', { response: { ...base, status: 'in_progress', output: [] } }],
    ['response.in_progress', { response: { ...base, status: 'in_progress', output: [] } }],
  ];
  items.forEach((item, index) => {
    events.push(['response.output_item.added', { output_index: index, item: { ...item, status: 'in_progress' } }]);
    if (item.type === 'message') {
      const text = item.content[0].text;
      events.push(['response.output_text.delta', { output_index: index, item_id: item.id, content_index: 0, delta: text }]);
      events.push(['response.output_text.done', { output_index: index, item_id: item.id, content_index: 0, text }]);
    } else {
      events.push(['response.function_call_arguments.done', { output_index: index, item_id: item.id, arguments: item.arguments }]);
    }
    events.push(['response.output_item.done', { output_index: index, item }]);
  });
  events.push(['response.completed', { response: { ...base, status: 'completed', output: items, usage: USAGE } }]);
  return events.map(([type, data], sequence) => [type, { type, sequence_number: sequence, ...data }]);
}

function sendJson(res, status, data) {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify(data));
}

function answerResponses(body, res) {
  const decision = decide(body);
  const items = decision.items.map(outputItem);
  const model = typeof body.model === 'string' ? body.model : 'fake-model';
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', connection: 'keep-alive' });
  for (const [event, data] of sseEvents(model, items)) res.write(`event: ${event}\ndata: ${JSON.stringify(data)}\n\n`);
  res.end();
  return { rule: decision.rule, items };
}

const server = createServer((req, res) => {
  const chunks = [];
  req.on('data', (chunk) => chunks.push(chunk));
  req.on('end', () => {
    let body = null;
    let reply;
    try {
      const raw = decodeBody(Buffer.concat(chunks), req.headers['content-encoding']);
      if (raw.length > 0) body = JSON.parse(raw.toString('utf8'));
    } catch (err) {
      sendJson(res, 400, { error: { message: `unreadable body: ${err.message}` } });
      log({ method: req.method, url: req.url, headers: req.headers, body: null, reply: { rule: 'bad_body' } });
      return;
    }
    const path = (req.url ?? '/').split('?')[0];
    if (req.method === 'POST' && path.endsWith('/responses') && body !== null && typeof body === 'object') {
      reply = answerResponses(body, res);
    } else if (req.method === 'GET' && path.endsWith('/models')) {
      sendJson(res, 200, { object: 'list', data: [] });
      reply = { rule: 'models' };
    } else {
      sendJson(res, 404, { error: { message: `no route for ${req.method} ${path}` } });
      reply = { rule: 'not_found' };
    }
    log({ method: req.method, url: req.url, headers: req.headers, body, reply });
  });
});

server.listen(Number(options.port), '127.0.0.1', () => {
  const address = server.address();
  process.stdout.write(`LISTENING ${typeof address === 'object' && address !== null ? address.port : options.port}\n`);
});

for (const signal of ['SIGINT', 'SIGTERM']) {
  process.on(signal, () => {
    server.close(() => process.exit(0));
    server.closeAllConnections();
  });
}
