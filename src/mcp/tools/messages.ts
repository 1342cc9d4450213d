/** The tools that send, read and follow messages of this session. */
import { z } from 'zod';
import { MAX_TASK_ID_BYTES, MAX_TEXT_BYTES, msgIdText, STATUSES } from '../../envelope/envelope.js';
import { MAX_RECIPIENTS } from '../../agent/groups.js';
import { LOCAL_READ, peerName, sessionId, tool, utf8Text, type ToolDefinition } from './define.js';

const taskId = utf8Text(MAX_TASK_ID_BYTES);
// The body's bound is checked by the agent, which refuses a larger one as `too_large`.
const TEXT_LIMIT = `at most ${MAX_TEXT_BYTES / 1024} KiB of UTF-8`;
const groupId = msgIdText.describe('the group_id send_message returned for a message to several recipients');

/** Exactly one of two arguments that name what a call is about. */
function exactlyOne<T extends Record<string, unknown>>(a: keyof T & string, b: keyof T & string) {
  return (args: T, ctx: z.RefinementCtx) => {
    if ((args[a] === undefined) === (args[b] === undefined)) ctx.addIssue({ code: 'custom', path: [], message: `give exactly one of ${a} and ${b}` });
  };
}

const receipt = z
  .object({
    sender: z.string().describe("the sender's public key, exactly as receipt.sender in receive_messages"),
    msg_id: z.string().describe('the message id, exactly as receipt.msg_id in receive_messages'),
  })
  .strict();

export const MESSAGE_TOOLS: ToolDefinition[] = [
  tool({
    name: 'get_my_session_id',
    description: 'This session: its id, this identity (public key) and fingerprint.',
    annotations: LOCAL_READ,
    input: z.object({}).strict(),
    run: (agent) => ({ session_id: agent.session, identity: agent.identity.key, fingerprint: agent.identity.fingerprint }),
  }),
  tool({
    name: 'send_message',
    description:
      'Sign a message to a peer (petname) or to "self" (your other sessions) and queue it durably. Returns state "pending" (no relay has it yet) or, for a repeated idempotency_key, the original receipt. `to` may also be a list of petnames or the name of an audience a person defined (list_audiences): one signed copy goes to each recipient, all sharing a `group_id`; the answer lists each recipient\'s msg_id and state (`not_sent` with the reason when none of its sessions could be named), and message_status with the group_id shows who answered. A `note` says when the target session was never seen (on no roster, in none of your messages), when it is on no roster now (the relay holds the message for it), or when no relay answers (the message goes out when one does). A delivery state is never evidence that the peer read or did anything.',
    // Not idempotent: each call without idempotency_key is a new message. Open world: it
    // goes through relays to other identities and machines.
    annotations: { readOnlyHint: false, destructiveHint: false, idempotentHint: false, openWorldHint: true },
    input: z
      .object({
        to: z
          .union([peerName, z.array(peerName).min(1).max(MAX_RECIPIENTS)])
          .describe(`petname from list_peers, "self", an audience name (list_audiences), or a list of up to ${MAX_RECIPIENTS} petnames`),
        text: z.string().describe(`message body, ${TEXT_LIMIT}`),
        session: sessionId.optional().describe('target session (a single peer only): exact id or unique prefix; default: the session that peer last wrote from (or you last wrote to), else its only live one'),
        task_id: taskId.optional().describe('ties progress, questions and results of one piece of work together'),
        status: z
          .enum(STATUSES)
          .optional()
          .describe('what the message is for a task: "update" (progress), "needs_input" (a question), "result", "failed" or "canceled" (finished)'),
        in_reply_to: msgIdText.optional().describe('the msg_id this message answers'),
        idempotency_key: z.string().min(1).max(128).optional().describe('same key + same message = same receipt (duplicate: true), for 24 h; for several recipients it covers the whole group'),
      })
      .strict(),
    run: (agent, args) => agent.sendMessage(args),
  }),
  tool({
    name: 'cancel_task',
    description:
      'Tell a peer to stop work on a task: sends it a message with status "canceled". With group_id instead of to and task_id: every recipient of that group that has not answered yet (each copy answered by its own "canceled" message). What the peer does with it is up to the peer.',
    // A message like any other: additive here, and each call sends one more.
    annotations: { readOnlyHint: false, destructiveHint: false, idempotentHint: false, openWorldHint: true },
    input: z
      .object({
        to: peerName.optional().describe('petname from list_peers, or "self" (with task_id)'),
        task_id: taskId.optional().describe('the task to stop, as the peer knows it (with to)'),
        group_id: groupId.optional(),
        reason: z.string().optional().describe(`why, sent as the message text (${TEXT_LIMIT}); default "canceled"`),
        session: sessionId.optional().describe('target session, as for send_message (with to)'),
      })
      .strict()
      .superRefine((args, ctx) => {
        if (args.group_id !== undefined ? args.to !== undefined || args.task_id !== undefined || args.session !== undefined : args.to === undefined || args.task_id === undefined) {
          ctx.addIssue({ code: 'custom', path: [], message: 'give to and task_id (one peer), or group_id alone (a group)' });
        }
      }),
    run: (agent, args) =>
      args.group_id !== undefined
        ? agent.cancelGroup(args.group_id, args.reason)
        : agent.cancelTask({ to: args.to!, task_id: args.task_id!, ...(args.reason !== undefined && { reason: args.reason }), ...(args.session !== undefined && { session: args.session }) }),
  }),
  tool({
    name: 'message_status',
    description:
      'Delivery state of a message you sent (outbound) or received (inbound), with the time of each state. With group_id (a message you sent to several): the panel, each recipient\'s delivery state and outcome — its first terminal answer (result, failed, canceled) linked by in_reply_to (or its task_id), later ones as duplicates, `needs_input` when it asked something, `refused`, `not_sent` or `waiting` — and counts per outcome. For a message you sent, entries with "reported_by": "receiver" are states the receiver reported in signed receipts (receiver_stored, receiver_acknowledged, or receiver_refused with its code), at the receiver\'s clock; `state` is the furthest state known. State "awaiting_session" (asked of the relays\' rosters now, not recorded): a relay holds the message for a session that is on no roster; `awaiting` says which, since when (`since_at`), and that a live session of the recipient\'s identity takes it when one runs.',
    // Changes nothing, but asks the relays for their rosters (awaiting_session).
    annotations: { readOnlyHint: true, destructiveHint: false, idempotentHint: true, openWorldHint: true },
    input: z
      .object({ msg_id: z.string().optional().describe('the msg_id send_message returned, or of a received message'), group_id: groupId.optional() })
      .strict()
      .superRefine(exactlyOne('msg_id', 'group_id')),
    run: (agent, args) => (args.group_id !== undefined ? agent.groupStatus(args.group_id) : agent.messageStatus(args.msg_id!)),
  }),
  tool({
    name: 'list_pending',
    description: 'Messages you sent that no relay has accepted yet.',
    annotations: LOCAL_READ,
    input: z.object({}).strict(),
    run: async (agent) => ({ pending: await agent.listPending() }),
  }),
  tool({
    name: 'cancel_pending',
    description:
      'Drop a message you sent that no relay has accepted yet (see list_pending): it is not offered again, and message_status shows it as canceled. A message a relay already took cannot be called back.',
    // Destructive: the message will never be delivered. Repeating it says not_pending.
    annotations: { readOnlyHint: false, destructiveHint: true, idempotentHint: false, openWorldHint: false },
    input: z.object({ msg_id: z.string().min(1).max(128).describe('the msg_id send_message returned') }).strict(),
    run: (agent, args) => agent.cancelPending(args.msg_id),
  }),
  tool({
    name: 'receive_messages',
    description:
      "Fetch current unread messages: questions and results first, progress updates after them; within each, each sender's in the order it sent them, senders in the order they arrived. Mail to an ended session of yours that this session took comes after your own, with to_session naming the session it was written to. Nothing is consumed: call acknowledge_messages with the receipts once you have read them.",
    // Read-only for mail: it never consumes. reset_notification changes only when the next
    // notice may come, never what is read, so the hint stays honest for every call.
    annotations: LOCAL_READ,
    input: z
      .object({
        notification_id: z.string().optional().describe('from the notice that woke you; advisory'),
        reset_notification: z.boolean().optional().describe('forget the current notice so the next one can come at once'),
        limit: z.number().int().min(1).max(100).optional().describe('at most this many messages (1-100, default 20); more: true says others wait'),
      })
      .strict(),
    run: (agent, args) => agent.receive(args.limit, args.reset_notification === true),
  }),
  tool({
    name: 'acknowledge_messages',
    description: 'Mark messages read by their exact receipts ({sender, msg_id} from receive_messages). Idempotent. Nothing is sent to the sender.',
    // Not destructive: an acknowledged message stays in conversation_history; it only stops
    // coming back from receive_messages. Local: no receipt goes to the sender.
    annotations: { readOnlyHint: false, destructiveHint: false, idempotentHint: true, openWorldHint: false },
    input: z.object({ messages: z.array(receipt).min(1).max(100).describe('1-100 receipts, exactly as receive_messages gave them') }).strict(),
    run: (agent, args) => agent.acknowledge(args.messages),
  }),
  tool({
    name: 'conversation_history',
    description:
      'Messages exchanged with one peer, both directions, oldest first; or, with group_id, the thread of a message you sent to several: its copies, follow-ups and the replies linked to them. Read-only unless consume is true, which acknowledges exactly the inbound messages returned.',
    // Not read-only because of consume (static hints must cover every call); consuming
    // twice changes nothing more.
    annotations: { readOnlyHint: false, destructiveHint: false, idempotentHint: true, openWorldHint: false },
    input: z
      .object({
        peer: peerName.optional().describe('petname from list_peers, or "self"'),
        group_id: groupId.optional(),
        limit: z.number().int().min(1).max(100).optional().describe('the last this many messages (1-100, default 20)'),
        consume: z.boolean().optional().describe('true: also acknowledge the inbound messages returned (default false)'),
      })
      .strict()
      .superRefine(exactlyOne('peer', 'group_id')),
    run: (agent, args) =>
      args.group_id !== undefined ? agent.groupHistory(args.group_id, args.limit ?? 20, args.consume ?? false) : agent.history(args.peer!, args.limit ?? 20, args.consume ?? false),
  }),
];
