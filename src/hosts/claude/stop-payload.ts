/**
 * The JSON Claude hands a Stop hook on stdin: the listener takes its `session_id` when
 * nothing pins the session. Reading it is bounded in time and size, since the hook hands
 * it over at once and a listener must never hang on stdin.
 */
import { z } from 'zod';
import { unsafeNameReason } from '../../config/paths.js';
import { parseJsonWith } from '../../json.js';
import { log } from '../../log.js';

/** The hook hands over its JSON at once; never wait on stdin longer than this. */
const STDIN_BOUND_MS = 1_000;
const STDIN_MAX_BYTES = 8 * 1024 * 1024;

/** Reads stdin until it ends, holds a whole JSON document, or the bound passes. */
function readStdinBounded(): Promise<string> {
  const stdin = process.stdin;
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    let bytes = 0;
    const finish = (): void => {
      clearTimeout(timer);
      stdin.off('data', onData).off('end', finish).off('error', finish);
      stdin.destroy();
      resolve(bytes > STDIN_MAX_BYTES ? '' : Buffer.concat(chunks).toString('utf8'));
    };
    const onData = (chunk: Buffer): void => {
      chunks.push(chunk);
      bytes += chunk.length;
      if (bytes > STDIN_MAX_BYTES || (chunk.toString('utf8').trimEnd().endsWith('}') && parsesAsJson(Buffer.concat(chunks).toString('utf8')))) finish();
    };
    const timer = setTimeout(finish, STDIN_BOUND_MS);
    stdin.on('data', onData).on('end', finish).on('error', finish);
  });
}

function parsesAsJson(text: string): boolean {
  return parseJsonWith(z.unknown(), text).ok;
}

const stopPayloadSchema = z.object({ session_id: z.string().min(1) });

/** The Stop payload's `session_id`, when stdin carries a usable one. */
export async function sessionFromStopPayload(): Promise<string | undefined> {
  if (process.stdin.isTTY) return undefined;
  const text = await readStdinBounded();
  const parsed = parseJsonWith(stopPayloadSchema, text);
  if (!parsed.ok) return undefined;
  const session = parsed.value.session_id.normalize('NFC');
  const reason = unsafeNameReason(session);
  if (reason === undefined) return session;
  log.warn('listener_payload_session_unusable', { reason });
  return undefined;
}
