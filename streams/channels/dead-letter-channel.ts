// rs.<run>.dlq: what could not be decoded or validated, with the reason (Rs-Error), where it came from
// (Rs-Original-Subject/Seq), who gave up on it (Rs-Actor) and the original payload and headers.
import type { JsMsg } from "@nats-io/jetstream";
import { deadLetter } from "../dead-letter.js";
import type { Wire } from "../wire.js";

export class DeadLetterChannel {
  constructor(private readonly wire: Wire) {}

  get subject(): string {
    return this.wire.names.subjects.dlq;
  }

  send(msg: JsMsg, reason: string, actor: string): Promise<void> {
    return deadLetter(this.wire.js, this.subject, msg, reason, actor);
  }
}
