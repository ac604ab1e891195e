// rs.<run>.dlq: what could not be decoded or validated, with the reason (Rs-Error), where it came from
// (Rs-Original-Subject/Seq), who gave up on it (Rs-Actor) and the original payload and headers.
import type { JsMsg } from "@nats-io/jetstream";
import { deadLetter } from "../dead-letter.js";
import { Hdr } from "../headers.js";
import { StreamReader } from "../stream-reader.js";
import type { Wire } from "../wire.js";

export class DeadLetterChannel {
  constructor(private readonly wire: Wire) {}

  get subject(): string {
    return this.wire.names.subjects.dlq;
  }

  send(msg: JsMsg, reason: string, actor: string): Promise<void> {
    return deadLetter(this.wire.js, this.subject, msg, reason, actor);
  }

  /**
   * The stream sequences of `originalSubject` that the run dead-lettered: a replay passes over them as
   * the learner did, whatever the reason was (a failed check, a step they broke, a crash loop).
   */
  async originalSeqs(originalSubject: string, waitMs = 500): Promise<Set<number>> {
    const out = new Set<number>();
    const reader = new StreamReader(this.wire.js, { stream: this.wire.names.streams.events, subject: this.subject, fromSeq: 1, batch: 256, headersOnly: true });
    try {
      for (;;) {
        const m = await reader.next(waitMs);
        if (!m) break;
        if (m.headers?.get(Hdr.originalSubject) === originalSubject) {
          const seq = Number(m.headers.get(Hdr.originalSeq));
          if (Number.isInteger(seq) && seq > 0) out.add(seq);
        }
        if (m.info.pending === 0) break;
      }
    } finally {
      await reader.close();
    }
    return out;
  }
}
