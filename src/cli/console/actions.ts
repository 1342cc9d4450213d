/**
 * What a person can do from the console, each the same operation as its CLI command
 * (pair, peers remove, failed-deliveries, outbox drop) and with the same checks: the
 * pairing steps through the console's `cli` session, the others on the shared stores, so
 * running sessions see each change on their next read (a revoked peer at once:
 * agent/peer-watch.ts reads peers.json again when it changes). Each action returns the
 * sentence the page shows and the page to show it on; a refused one throws its
 * InterlinkError, whose message the page shows instead.
 */
import { z } from 'zod';
import { mailboxPath, outboxPath } from '../../config/layout.js';
import { InterlinkError } from '../../errors.js';
import { FailedDeliveries, failedSessions } from '../../hosts/codex/failed.js';
import { discardFailure, retryFailure } from '../../hosts/codex/recovery.js';
import { Mailbox } from '../../mailbox/mailbox.js';
import { Outbox, outboundState } from '../../outbox/outbox.js';
import { removePeer } from '../../peers/peers.js';
import { allSessions, type ConsoleContext } from './snapshot.js';

export interface Done {
  text: string;
  /** False when the action ran but did not get what was asked (a retry Codex did not take). */
  ok: boolean;
  /** The page that shows the result. */
  back: string;
}

const fingerprintForm = z.object({ fingerprint: z.string().min(1).max(128) });
const optionalName = z
  .string()
  .max(128)
  .transform((s) => s.trim())
  .optional();
const SCHEMAS = {
  '/pairing/request': z.object({ target: z.string().trim().min(1, 'say whom to ask').max(256), petname: optionalName }),
  '/pairing/accept': fingerprintForm.extend({ petname: optionalName }),
  '/pairing/reject': fingerprintForm,
  '/pairing/confirm': fingerprintForm,
  '/pairing/cancel': fingerprintForm,
  '/pairing/revoke': z.object({ petname: z.string().min(1).max(128) }),
  '/recovery/retry': z.object({ id: z.string().min(1).max(64) }),
  '/recovery/discard': z.object({ id: z.string().min(1).max(64) }),
  '/recovery/drop': z.object({ msg_id: z.string().min(1).max(128) }),
} as const;

export type ActionPath = keyof typeof SCHEMAS;

export function isActionPath(path: string): path is ActionPath {
  return Object.hasOwn(SCHEMAS, path);
}

/** The form's fields as the action takes them; a missing or malformed one is a usage error. */
function fields<P extends ActionPath>(path: P, form: URLSearchParams): z.infer<(typeof SCHEMAS)[P]> {
  const parsed = SCHEMAS[path].safeParse(Object.fromEntries(form));
  if (!parsed.success) throw new InterlinkError('usage', `the form was incomplete: ${parsed.error.issues.map((i) => `${i.path.join('.') || 'form'}: ${i.message}`).join('; ')}`);
  return parsed.data as z.infer<(typeof SCHEMAS)[P]>;
}

const named = (petname: string | undefined) => (petname !== undefined && petname !== '' ? { petname } : {});

/** Runs the action at `path` with the posted form. */
export async function runAction(ctx: ConsoleContext, path: ActionPath, form: URLSearchParams, after: { pairing: () => void }): Promise<Done> {
  const pairing = ctx.agent.pairing;
  switch (path) {
    case '/pairing/request': {
      const { target, petname } = fields(path, form);
      const r = await pairing.request(target, named(petname));
      after.pairing();
      const next = r.confirm_needed ? 'When they have accepted, this page offers Confirm: compare the code first.' : 'When they accept, they become your peer here.';
      return { ok: true, text: `${r.repeated ? 'Asked again' : 'Asked'} ${r.petname} (fingerprint ${r.fingerprint}) to pair. Verification code ${r.code}: compare it with the other person over another channel. ${next}`, back: '/pairing' };
    }
    case '/pairing/accept': {
      const { fingerprint, petname } = fields(path, form);
      const r = await pairing.accept(fingerprint, named(petname));
      after.pairing();
      return { ok: true, text: `${r.petname} (fingerprint ${r.fingerprint}) is now a peer. Verification code ${r.code}. The confirmation goes to them through the relays.`, back: '/pairing' };
    }
    case '/pairing/reject': {
      const r = await pairing.reject(fields(path, form).fingerprint);
      return { ok: true, text: `Rejected the request from ${r.fingerprint}.`, back: '/pairing' };
    }
    case '/pairing/confirm': {
      const r = await pairing.confirm(fields(path, form).fingerprint);
      return { ok: true, text: `${r.petname} (fingerprint ${r.fingerprint}) is now a peer. Verification code ${r.code}.`, back: '/pairing' };
    }
    case '/pairing/cancel': {
      const r = await pairing.cancel(fields(path, form).fingerprint);
      return { ok: true, text: `Withdrew your request to ${r.petname} (${r.fingerprint}). If they accept it now, nothing changes here.`, back: '/pairing' };
    }
    case '/pairing/revoke': {
      const { petname } = fields(path, form);
      await removePeer(ctx.config.peersPath, petname);
      return { ok: true, text: `Revoked ${petname}: running sessions no longer admit its messages, and sending to it is refused.`, back: '/pairing' };
    }
    case '/recovery/retry': {
      const { id } = fields(path, form);
      const store = await failureStore(ctx, id);
      const state = ctx.config.stateDir;
      const result = await retryFailure(store, id, {
        bin: ctx.config.codexBin,
        onQueued: async (failure) => {
          // As `failed-deliveries retry` records it: the notice reached Codex.
          const mailbox = await Mailbox.open(mailboxPath(state, ctx.identity.key, failure.thread));
          try {
            await mailbox.recordNoticeOutcome(failure.notification_id, 'host_queued');
          } finally {
            await mailbox.close();
          }
        },
      });
      if (result.outcome !== 'host_queued') return { ok: false, text: `codex queue did not take it (${result.outcome}): ${result.reason} — still saved as ${result.id}`, back: '/recovery' };
      return { ok: true, text: `Queued notice ${result.notification_id} for thread ${result.thread}; the saved failure is gone.`, back: '/recovery' };
    }
    case '/recovery/discard': {
      const { id } = fields(path, form);
      const result = await discardFailure(await failureStore(ctx, id), id);
      return { ok: true, text: `Discarded ${id}. ${result.note}`, back: '/recovery' };
    }
    case '/recovery/drop': {
      const { msg_id } = fields(path, form);
      return { ok: true, text: await dropPending(ctx, msg_id), back: '/recovery' };
    }
  }
}

/** The saved failure `id` (ids are unique across sessions). */
export async function failureStore(ctx: ConsoleContext, id: string): Promise<FailedDeliveries> {
  for (const session of await failedSessions(ctx.config.stateDir, ctx.identity.key)) {
    const store = FailedDeliveries.forSession(ctx.config.stateDir, ctx.identity.key, session);
    if ((await store.get(id)) !== undefined) return store;
  }
  throw new InterlinkError('unknown_failure', `no saved failure ${id}; it may have been retried, discarded or expired`);
}

/** `outbox drop`: a message no relay has accepted, from whichever session sent it. */
async function dropPending(ctx: ConsoleContext, msgId: string): Promise<string> {
  for (const session of await allSessions(ctx)) {
    const store = await Outbox.open(outboxPath(ctx.config.stateDir, ctx.identity.key, session));
    try {
      if ((await store.get(msgId)) === undefined) continue;
      const { ended, record } = await store.end(msgId, 'canceled', 'dropped in the console');
      if (!ended) throw new InterlinkError('not_pending', `message ${msgId} is ${record === undefined ? 'gone' : outboundState(record)}, not pending; only a message no relay has accepted can be dropped`);
      return `Dropped ${msgId} (session ${session}): it will not be offered again.`;
    } finally {
      await store.close();
    }
  }
  throw new InterlinkError('unknown_message', `no message ${msgId} in this identity's outboxes`);
}
