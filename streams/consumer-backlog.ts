// What each durable work consumer of a run has not finished, and how old the oldest of it is: the other
// half of a health check (an actor can heartbeat happily while its input piles up, or one message can sit
// unacked past every deadline). Read-only: stream and consumer info plus one message get per consumer.
import type { MsgRequest } from "@nats-io/jetstream";
import { MSG_ID_HEADER } from "./headers.js";
import type { Wire } from "./wire.js";

export interface OldestMessage {
  seq: number;
  subject: string;
  /** The publisher's msg-id (a task id, `raw:<task id>`), when it set one. */
  msgId?: string;
  time: string;
  ageMs: number;
}

export interface ConsumerBacklog {
  stream: string;
  consumer: string;
  subject: string;
  /** Not yet delivered. */
  pending: number;
  /** Delivered and not acked (being worked on, or lost with a dead actor until ack_wait ends). */
  ackPending: number;
  redelivered: number;
  /** The first message the consumer has not acked: ack_floor + 1 on its subject. Null when all are done. */
  oldest: OldestMessage | null;
}

/** Every durable consumer on the run's streams (ordered readers such as the learner's are ephemeral: left out). */
export async function consumerBacklogs(wire: Wire, now = Date.now()): Promise<ConsumerBacklog[]> {
  const jsm = await wire.jsm();
  const out: ConsumerBacklog[] = [];
  for (const stream of Object.values(wire.names.streams)) {
    const infos = [];
    try {
      for await (const ci of jsm.consumers.list(stream)) if (ci.config.durable_name) infos.push(ci);
    } catch {
      continue; // a stream this run does not have (yet)
    }
    for (const ci of infos) {
      const subject = ci.config.filter_subject ?? ">";
      let oldest: OldestMessage | null = null;
      if (ci.num_pending + ci.num_ack_pending > 0) {
        // The server (2.9+) answers next_by_subj; the client's request type does not list it yet.
        const query = { seq: ci.ack_floor.stream_seq + 1, next_by_subj: subject } as unknown as MsgRequest;
        const m = await jsm.streams.getMessage(stream, query).catch(() => null);
        if (m) {
          const msgId = m.header?.get(MSG_ID_HEADER) || undefined;
          oldest = { seq: m.seq, subject: m.subject, msgId, time: m.time.toISOString(), ageMs: Math.max(0, now - m.time.getTime()) };
        }
      }
      out.push({
        stream,
        consumer: ci.name,
        subject,
        pending: ci.num_pending,
        ackPending: ci.num_ack_pending,
        redelivered: ci.num_redelivered,
        oldest,
      });
    }
  }
  return out;
}
