// rs.<run>.dlq: what could not be decoded or validated, with the reason (Rs-Error), where it came from
// (Rs-Original-Subject/Seq), who gave up on it (Rs-Actor) and the original payload and headers.
import type { JsMsg } from "@nats-io/jetstream";
import { deadLetter } from "../dead-letter.js";
import { Hdr, headerRecord } from "../headers.js";
import type { Wire } from "../wire.js";

export interface DeadLetter {
  seq: number;
  reason: string;
  originalSubject: string;
  originalSeq: number;
  actor: string;
  headers: Record<string, string>;
  data: Uint8Array;
}

export class DeadLetterChannel {
  constructor(private readonly wire: Wire) {}

  get subject(): string {
    return this.wire.names.subjects.dlq;
  }

  send(msg: JsMsg, reason: string, actor: string): Promise<void> {
    return deadLetter(this.wire.js, this.subject, msg, reason, actor);
  }

  /** A stored dead letter, read back (inspect, dashboard). */
  static describe(m: { seq: number; data: Uint8Array; header?: import("@nats-io/transport-node").MsgHdrs }): DeadLetter {
    const h = headerRecord(m.header);
    return {
      seq: m.seq,
      reason: h[Hdr.error] ?? "",
      originalSubject: h[Hdr.originalSubject] ?? "",
      originalSeq: Number(h[Hdr.originalSeq] ?? 0),
      actor: h[Hdr.actor] ?? "",
      headers: h,
      data: m.data,
    };
  }
}
