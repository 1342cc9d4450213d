#!/usr/bin/env node
/**
 * A scripted stand-in for the Anthropic Messages API, for driving the real `claude` CLI
 * offline in host tests. It listens on 127.0.0.1 only, prints `LISTENING <port>` on
 * stdout, and appends one JSON line per request to the log file ({t, method, url,
 * headers, body, reply}), so a test can read exactly what the model was shown and what
 * it answered.
 *
 *   node scripts/host/fake-anthropic.mjs [--port N] [--log FILE]
 *
 * The script is a pure function of the request, so auxiliary calls cannot derail it.
 * It looks at the last user message only:
 *   - a tool_result for a `…__receive_messages` call → a `…__acknowledge_messages` call
 *     whose `messages` are the receipts from that result;
 *   - a tool_result for a `…__acknowledge_messages` call → the text `DONE`;
 *   - any other tool_result → the text `TOOL_RESULT_SEEN: <result>`;
 *   - text naming `receive_messages` and a `notification_id` (an Interlink notice) → a
 *     call of the `…__receive_messages` tool offered in `tools`;
 *   - anything else → the text `FAKE_REPLY: <first 60 characters of the last text>`.
 * Tool names are taken from the request's `tools`, never assumed.
 */
import { appendFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { parseArgs } from 'node:util';
import { brotliDecompressSync, gunzipSync, inflateSync } from 'node:zlib';

const { values: options } = parseArgs({
  options: { port: { type: 'string', default: '0' }, log: { type: 'string' } },
});

let toolUseCounter = 0;
let messageCounter = 0;

function log(entry) {
  if (options.log !== undefined) appendFileSync(options.log, JSON.stringify({ t: Date.now(), ...entry }) + '\n');
}

function decodeBody(raw, encoding) {
  switch ((encoding ?? '').trim()) {
    case 'gzip':
      return gunzipSync(raw);
    case 'deflate':
      return inflateSync(raw);
    case 'br':
      return brotliDecompressSync(raw);
    default:
      return raw;
  }
}

/** Content of a message as blocks, whether it was sent as a string or as blocks. */
function blocksOf(message) {
  if (typeof message?.content === 'string') return [{ type: 'text', text: message.content }];
  return Array.isArray(message?.content) ? message.content : [];
}

function textOf(content) {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return '';
  return content.map((block) => (block?.type === 'text' && typeof block.text === 'string' ? block.text : '')).join('');
}

/** The tool offered under a name ending in `__<suffix>` (MCP tools are `mcp__<server>__<tool>`). */
function offeredTool(body, suffix) {
  const tools = Array.isArray(body.tools) ? body.tools : [];
  return tools.map((t) => t?.name).find((name) => typeof name === 'string' && name.endsWith(`__${suffix}`));
}

/** The name of the tool_use with this id in the conversation so far. */
function toolNameOf(messages, toolUseId) {
  for (const message of messages) {
    if (message?.role !== 'assistant') continue;
    for (const block of blocksOf(message)) if (block?.type === 'tool_use' && block.id === toolUseId) return block.name;
  }
  return undefined;
}

/** Receipts from a receive_messages result: `{messages: [{receipt: {sender, msg_id}}]}`. */
function receiptsFrom(resultText) {
  let parsed;
  try {
    parsed = JSON.parse(resultText);
  } catch {
    return [];
  }
  const messages = Array.isArray(parsed?.messages) ? parsed.messages : [];
  return messages
    .map((m) => m?.receipt)
    .filter((r) => typeof r?.sender === 'string' && typeof r?.msg_id === 'string')
    .map((r) => ({ sender: r.sender, msg_id: r.msg_id }));
}

const NOTIFICATION_ID = /notification_id["'\s:=]*([A-Za-z0-9._:-]+)/;

/** Decides the reply: `{rule, blocks: [{type:'text', text} | {type:'tool_use', name, input}]}`. */
function decide(body) {
  const messages = Array.isArray(body.messages) ? body.messages : [];
  const lastUser = [...messages].reverse().find((m) => m?.role === 'user');
  const blocks = blocksOf(lastUser);

  const toolResult = blocks.find((b) => b?.type === 'tool_result');
  if (toolResult !== undefined) {
    const name = toolNameOf(messages, toolResult.tool_use_id) ?? '';
    const resultText = textOf(toolResult.content);
    if (name.endsWith('__receive_messages')) {
      const receipts = receiptsFrom(resultText);
      const ack = offeredTool(body, 'acknowledge_messages');
      if (receipts.length > 0 && ack !== undefined) {
        return { rule: 'acknowledge', blocks: [{ type: 'tool_use', name: ack, input: { messages: receipts } }] };
      }
      return { rule: 'nothing_to_acknowledge', blocks: [{ type: 'text', text: `NOTHING_TO_ACKNOWLEDGE: ${resultText.slice(0, 200)}` }] };
    }
    if (name.endsWith('__acknowledge_messages')) return { rule: 'done', blocks: [{ type: 'text', text: 'DONE' }] };
    return { rule: 'tool_result', blocks: [{ type: 'text', text: `TOOL_RESULT_SEEN: ${resultText.slice(0, 200)}` }] };
  }

  const text = blocks.map((b) => (b?.type === 'text' && typeof b.text === 'string' ? b.text : '')).join('\n');
  const receive = offeredTool(body, 'receive_messages');
  if (receive !== undefined && text.includes('receive_messages') && NOTIFICATION_ID.test(text)) {
    const notificationId = NOTIFICATION_ID.exec(text)?.[1];
    const input = notificationId !== undefined ? { notification_id: notificationId } : {};
    return { rule: 'receive', blocks: [{ type: 'text', text: 'Fetching the messages.' }, { type: 'tool_use', name: receive, input }] };
  }
  const lastText = [...blocks].reverse().find((b) => b?.type === 'text' && typeof b.text === 'string')?.text ?? '';
  return { rule: 'reply', blocks: [{ type: 'text', text: `FAKE_REPLY: ${lastText.slice(0, 60)}` }] };
}

function materialize(blocks) {
  return blocks.map((b) => (b.type === 'tool_use' ? { type: 'tool_use', id: `toolu_fake_${++toolUseCounter}`, name: b.name, input: b.input } : b));
}

function usage(output = 5) {
  return { input_tokens: 10, output_tokens: output, cache_creation_input_tokens: 0, cache_read_input_tokens: 0 };
}

function messageEnvelope(model, content, stopReason) {
  return { id: `msg_fake_${++messageCounter}`, type: 'message', role: 'assistant', model, content, stop_reason: stopReason, stop_sequence: null, usage: usage() };
}

/** message_start → per block start/delta/stop → message_delta → message_stop. */
function sseEvents(model, content, stopReason) {
  const events = [['message_start', { type: 'message_start', message: { ...messageEnvelope(model, [], null), usage: usage(1) } }]];
  content.forEach((block, index) => {
    if (block.type === 'tool_use') {
      events.push(['content_block_start', { type: 'content_block_start', index, content_block: { type: 'tool_use', id: block.id, name: block.name, input: {} } }]);
      events.push(['content_block_delta', { type: 'content_block_delta', index, delta: { type: 'input_json_delta', partial_json: JSON.stringify(block.input) } }]);
    } else {
      events.push(['content_block_start', { type: 'content_block_start', index, content_block: { type: 'text', text: '' } }]);
      events.push(['content_block_delta', { type: 'content_block_delta', index, delta: { type: 'text_delta', text: block.text } }]);
    }
    events.push(['content_block_stop', { type: 'content_block_stop', index }]);
  });
  events.push(['message_delta', { type: 'message_delta', delta: { stop_reason: stopReason, stop_sequence: null }, usage: { output_tokens: 5 } }]);
  events.push(['message_stop', { type: 'message_stop' }]);
  return events;
}

function sendJson(res, status, data) {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify(data));
}

function answerMessages(body, res) {
  const decision = decide(body);
  const content = materialize(decision.blocks);
  const stopReason = content.some((b) => b.type === 'tool_use') ? 'tool_use' : 'end_turn';
  const model = typeof body.model === 'string' ? body.model : 'claude-fake';
  if (body.stream === true) {
    res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache', connection: 'keep-alive' });
    for (const [event, data] of sseEvents(model, content, stopReason)) res.write(`event: ${event}\ndata: ${JSON.stringify(data)}\n\n`);
    res.end();
  } else {
    sendJson(res, 200, messageEnvelope(model, content, stopReason));
  }
  return { rule: decision.rule, content, stop_reason: stopReason };
}

const server = createServer((req, res) => {
  const chunks = [];
  req.on('data', (chunk) => chunks.push(chunk));
  req.on('end', () => {
    const raw = decodeBody(Buffer.concat(chunks), req.headers['content-encoding']);
    let body = null;
    if (raw.length > 0) {
      try {
        body = JSON.parse(raw.toString('utf8'));
      } catch {
        body = raw.toString('utf8');
      }
    }
    const path = (req.url ?? '/').split('?')[0];
    let reply;
    if (req.method === 'POST' && path === '/v1/messages/count_tokens') {
      sendJson(res, 200, { input_tokens: 42 });
      reply = { rule: 'count_tokens' };
    } else if (req.method === 'POST' && path === '/v1/messages' && body !== null && typeof body === 'object') {
      reply = answerMessages(body, res);
    } else if (req.method === 'HEAD') {
      // Claude warms the connection up with `HEAD /`.
      res.writeHead(200);
      res.end();
      reply = { rule: 'head' };
    } else {
      sendJson(res, 404, { type: 'error', error: { type: 'not_found_error', message: `no route for ${req.method} ${path}` } });
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
