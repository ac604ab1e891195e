// Payloads larger than the server's max_payload travel through the run's blob bucket (an object store,
// chunked by the client) and the stream carries a pointer: the same subject, headers and msg-id as an
// inline message, an empty body, and `Rs-Blob` / `Rs-Blob-Bytes` / `Rs-Blob-Sha256` headers. Readers call
// readPayload and never see the difference. Why not just raise max_payload: a group of long multi-turn
// rollouts has no upper bound, and a publish that can never succeed would be retried until the task is
// given up — data lost. The blob is written (and acknowledged) before the pointer is published, so a
// pointer never refers to nothing; a crash in between leaves an orphan blob, never a lost message.
//
// Blob names are content-addressed (`<msg-id>.<sha256 prefix>`): a retried publish whose pointer the
// stream de-duplicates cannot overwrite the bytes the first pointer refers to.
import { sha256Hex } from "./sha256.js";
import type { JetStreamClient, PubAck } from "@nats-io/jetstream";
import type { MsgHdrs } from "@nats-io/transport-node";
import type { ObjectStore } from "@nats-io/obj";
import { PoisonMessageError } from "./dead-letter.js";
import { alignPayload, Hdr, headerBlockBytes, MSG_ID_HEADER } from "./headers.js";

/**
 * Room an inline message keeps free so that deadLetter (streams/dead-letter.ts), which re-publishes it
 * with Rs-Error (<= 1,024 characters), Rs-Original-Subject/Seq and Rs-Actor added, still fits.
 */
export const DEAD_LETTER_HEADROOM_BYTES = 2048;

/**
 * Room a producer that plans message sizes (Arrow chunks) leaves for the header block and the
 * dead-letter headroom. Our own headers are well under 1 KB; publishPayload measures them exactly.
 */
export const HEADER_ALLOWANCE_BYTES = 4096;

export interface PublishPayloadOptions {
  headers: MsgHdrs;
  /** De-duplication id: set as Nats-Msg-Id (on the inline message or the pointer). */
  msgId: string;
  /** The server's max_payload (nc.info.max_payload): it bounds headers + payload together. */
  maxPayload: number;
  /** Pad the headers so an inline payload arrives 8-byte aligned (alignPayload): for Arrow batches. */
  align?: boolean;
}

export interface PublishedPayload {
  ack: PubAck;
  /** The blob the payload went to, when it did not fit inline. */
  blob?: string;
}

/** Payload bytes a producer should plan for, next to headers, on a server whose max_payload is `maxPayload`. */
export function inlineLimit(maxPayload: number): number {
  return Math.max(0, maxPayload - HEADER_ALLOWANCE_BYTES);
}

/**
 * Publishes `data` on `subject` inline when it fits (headers + payload + dead-letter headroom <= max_payload), else via the blob
 * bucket. Call it with the final headers: it adds the msg-id, the alignment padding (`align`) and, for a
 * pointer, the blob headers.
 */
export async function publishPayload(
  js: JetStreamClient,
  blobs: ObjectStore | (() => Promise<ObjectStore>),
  subject: string,
  data: Uint8Array,
  o: PublishPayloadOptions,
): Promise<PublishedPayload> {
  o.headers.set(MSG_ID_HEADER, o.msgId);
  if (o.align) alignPayload(o.headers);
  if (headerBlockBytes(o.headers) + data.byteLength + DEAD_LETTER_HEADROOM_BYTES <= o.maxPayload)
    return { ack: await js.publish(subject, data, { headers: o.headers }) };
  const sha256 = sha256Hex(data);
  const blob = `${o.msgId}.${sha256.slice(0, 16)}`;
  const store = typeof blobs === "function" ? await blobs() : blobs;
  await store.putBlob({ name: blob, description: `payload of ${subject} msg-id ${o.msgId}` }, data);
  o.headers.delete(Hdr.pad); // nothing to align: the pointer's body is empty
  o.headers.set(Hdr.blob, blob);
  o.headers.set(Hdr.blobBytes, String(data.byteLength));
  o.headers.set(Hdr.blobSha256, sha256);
  return { ack: await js.publish(subject, new Uint8Array(0), { headers: o.headers }), blob };
}

/** The name of the blob a message points to, or undefined for an inline message. */
export function blobOf(msg: { headers?: MsgHdrs | undefined }): string | undefined {
  const name = msg.headers?.get(Hdr.blob);
  return name ? name : undefined;
}

/**
 * The message's payload: its own bytes, or the blob it points to, checked against the pointer's size and
 * SHA-256. A missing or mismatched blob is a PoisonMessageError (it goes to the dead-letter subject with
 * the reason); a failure to reach the object store is thrown as is (transient: retry).
 */
export async function readPayload(
  msg: { data: Uint8Array; headers?: MsgHdrs | undefined },
  blobs: ObjectStore | (() => Promise<ObjectStore>),
): Promise<Uint8Array> {
  const name = blobOf(msg);
  if (name === undefined) return msg.data;
  const h = msg.headers!;
  const bytes = Number(h.get(Hdr.blobBytes));
  const sha256 = h.get(Hdr.blobSha256);
  if (!Number.isInteger(bytes) || bytes < 0 || !/^[0-9a-f]{64}$/.test(sha256)) {
    throw new PoisonMessageError(`blob pointer ${JSON.stringify(name)} has no valid ${Hdr.blobBytes}/${Hdr.blobSha256} headers`);
  }
  let data: Uint8Array | null;
  try {
    data = await (typeof blobs === "function" ? await blobs() : blobs).getBlob(name);
  } catch (e) {
    // The client checks the object's own digest while reading: a corrupt object is the message's fault.
    if (/digests do not match/.test((e as Error).message)) throw new PoisonMessageError(`blob ${name} is corrupt: ${(e as Error).message}`);
    throw e;
  }
  if (data === null) throw new PoisonMessageError(`blob ${name} is missing from the run's blob bucket (deleted or never written)`);
  if (data.byteLength !== bytes) throw new PoisonMessageError(`blob ${name} has ${data.byteLength} bytes, its pointer says ${bytes}`);
  if (sha256Hex(data) !== sha256) throw new PoisonMessageError(`blob ${name} does not match the SHA-256 in its pointer`);
  return data;
}
