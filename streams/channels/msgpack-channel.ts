// A channel whose messages are MessagePack validated by a zod schema: the schema, headers, msg-id rule
// and size handling of one subject in one place. Values that do not match the schema are refused on
// publish and dead-lettered on consume.
import type { JsMsg, PubAck } from "@nats-io/jetstream";
import type { MsgHdrs } from "@nats-io/transport-node";
import type { z } from "zod";
import { deadLetter } from "../dead-letter.js";
import { ContentType, makeHeaders, type HeaderValues } from "../headers.js";
import { publishPayload, readPayload } from "../large-payload.js";
import { retryInfrastructure } from "../infrastructure-error.js";
import { decodeMsgpack, encodeValidated, validateForPublish } from "../msgpack-codec.js";
import { StreamReader } from "../stream-reader.js";
import type { Wire } from "../wire.js";
import { consumeDurable, type ConsumeOptions } from "./consume-options.js";

export interface MsgpackChannelSpec<S extends z.ZodType> {
  subject: string;
  /** The JetStream stream that stores the subject. */
  stream: string;
  schema: S;
  /** What one message is, in errors ("task", "raw rollout group"). */
  what: string;
  /** Rs-Kind header. */
  kind: string;
  /** Headers that make the message readable without decoding it. */
  headers(v: z.output<S>): HeaderValues;
  /** De-duplication id: a republished value is stored once. */
  msgId?(v: z.output<S>): string;
  /** The durable work consumer of the subject, when it has one. */
  durable?: string;
  /** Payloads past max_payload travel through the blob bucket (else a publish that big fails). */
  large?: boolean;
}

export class MsgpackChannel<S extends z.ZodType> {
  constructor(
    protected readonly wire: Wire,
    readonly spec: MsgpackChannelSpec<S>,
  ) {}

  get subject(): string {
    return this.spec.subject;
  }

  decode(data: Uint8Array): z.output<S> {
    return decodeMsgpack(this.spec.schema, data, this.spec.what);
  }

  /** Decodes a stored or delivered message, following a blob pointer when the channel allows them. */
  async decodeMessage(msg: { data: Uint8Array; headers?: MsgHdrs | undefined }): Promise<z.output<S>> {
    const data = this.spec.large ? await readPayload(msg, this.wire.blobs) : msg.data;
    return this.decode(data);
  }

  /** `opts.msgId` overrides the channel's rule: a caller retrying one value passes the same id each time. */
  async publish(value: z.input<S>, opts: { msgId?: string } = {}): Promise<PubAck> {
    // Validated once: the headers and msg-id read the same parsed value that is encoded.
    const parsed = validateForPublish(this.spec.schema, value);
    const data = encodeValidated(parsed);
    const headers = makeHeaders({ contentType: ContentType.msgpack, run: this.wire.run, kind: this.spec.kind, ...this.spec.headers(parsed) });
    const msgId = opts.msgId ?? this.spec.msgId?.(parsed);
    if (this.spec.large) {
      if (msgId === undefined) throw new Error(`${this.spec.what}: a large-payload channel needs a msg-id`);
      return retryInfrastructure(
        async () => (await publishPayload(this.wire.js, this.wire.blobs, this.spec.subject, data, { headers, msgId, maxPayload: this.wire.maxPayload() })).ack,
      );
    }
    // With a msg-id a repeat is stored once, so a publish that met a leader election is tried again.
    const publish = () => this.wire.js.publish(this.spec.subject, data, { headers, msgID: msgId });
    return msgId === undefined ? publish() : retryInfrastructure(publish);
  }

  /** Works through a durable consumer; `handler` gets decoded values, bad messages are dead-lettered. */
  consume(handler: (value: z.output<S>, msg: JsMsg) => Promise<void>, o: ConsumeOptions): Promise<void> {
    const durable = this.spec.durable;
    if (!durable) throw new Error(`${this.spec.what}: ${this.spec.subject} has no durable consumer`);
    return consumeDurable(this.wire, this.spec.stream, durable, async (msg) => handler(await this.decodeMessage(msg), msg), o);
  }

  /**
   * Reads the subject in stream order from a sequence, without acks: the caller keeps the position. With
   * `deadLetterAs` (the reading actor) a message that does not decode is also copied to the dead-letter subject
   * with the reason (once per message, whoever reads it: the copy's msg-id is the original's sequence).
   */
  reader(fromSeq: number, o: { deadLetterAs?: string } = {}): MsgpackReader<S> {
    return new MsgpackReader(this, new StreamReader(this.wire.js, { stream: this.spec.stream, subject: this.spec.subject, fromSeq }), o.deadLetterAs);
  }

  /**
   * The newest message stored on the subject (one direct request, no consumer), or null when there is none. A newest
   * message that does not decode is an error: a reader asked for the newest, not for some older one.
   */
  async last(): Promise<{ seq: number; value: z.output<S> } | null> {
    const jsm = await this.wire.jsm();
    const m = await retryInfrastructure(() => jsm.streams.getMessage(this.spec.stream, { last_by_subj: this.spec.subject }));
    return m === null ? null : { seq: m.seq, value: await this.decodeMessage({ data: m.data, headers: m.header }) };
  }

  /** Copies a message that does not decode to rs.<run>.dlq with the reason. */
  deadLetter(msg: JsMsg, reason: string, actor: string): Promise<void> {
    return deadLetter(this.wire.js, this.wire.names.subjects.dlq, msg, `${this.spec.what}: ${reason}`, actor);
  }

  /** Messages the durable consumer has not finished (pending + delivered and unacked); null if unknown. */
  async backlog(): Promise<number | null> {
    if (!this.spec.durable) return null;
    const info = await (await this.wire.jsm()).consumers.info(this.spec.stream, this.spec.durable).catch(() => null);
    return info === null ? null : info.num_pending + info.num_ack_pending;
  }
}

/** One message read in order: its value, or why it does not decode (a foreign or corrupt message, passed over). */
export type ReadMessage<S extends z.ZodType> = { seq: number; value: z.output<S> } | { seq: number; error: string };

export class MsgpackReader<S extends z.ZodType> {
  constructor(
    private readonly channel: MsgpackChannel<S>,
    private readonly reader: StreamReader,
    private readonly deadLetterAs?: string,
  ) {}

  /** Sequence of the next message this reader returns. */
  get position(): number {
    return this.reader.position;
  }

  /** The next message, or null when none arrived within waitMs. */
  async next(waitMs = 1000, signal?: AbortSignal): Promise<ReadMessage<S> | null> {
    const msg = await this.reader.next(waitMs, signal);
    if (!msg) return null;
    try {
      return { seq: msg.seq, value: await this.channel.decodeMessage(msg) };
    } catch (e) {
      const error = (e as Error).message;
      if (this.deadLetterAs !== undefined) await this.channel.deadLetter(msg, error, this.deadLetterAs);
      return { seq: msg.seq, error };
    }
  }

  close(): Promise<void> {
    return this.reader.close();
  }
}
