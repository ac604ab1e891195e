// Poison messages go to rs.<run>.dlq with the reason and the original payload, so nothing is lost and
// `rollstream inspect --subject rs.<run>.dlq` shows what went wrong. The pipeline then moves on.
import type { JetStreamClient, JsMsg } from "@nats-io/jetstream";
import { Hdr, makeHeaders } from "./headers.js";

/** An error that retrying cannot fix: the message itself is bad. */
export class PoisonMessageError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "PoisonMessageError";
  }
}

const POISON_NAMES = new Set(["PoisonMessageError", "MessageValidationError", "RolloutBatchError", "RolloutRejectedError"]);

export function isPoison(e: unknown): boolean {
  return e instanceof Error && POISON_NAMES.has(e.name);
}

export async function deadLetter(js: JetStreamClient, dlqSubject: string, msg: JsMsg, reason: string, actor: string): Promise<void> {
  const h = makeHeaders({ error: reason, originalSubject: msg.subject, originalSeq: msg.seq, actor });
  // Keep the producer's headers (content type, run, step) next to ours.
  if (msg.headers) {
    for (const [k, v] of msg.headers) {
      if (!h.has(k) && k !== Hdr.error) for (const one of v) h.append(k, one);
    }
  }
  await js.publish(dlqSubject, msg.data, { headers: h, msgID: `dlq:${msg.info.stream}:${msg.seq}` });
}
