// Header names and content types: they make `nats stream view` / `rollstream inspect` readable
// without knowing our payload formats.
import { Buffer } from "node:buffer";
import { headers as natsHeaders, type MsgHdrs } from "@nats-io/transport-node";

export const ContentType = {
  arrow: "application/vnd.apache.arrow.stream",
  msgpack: "application/msgpack",
  safetensors: "application/x-safetensors",
} as const;

export const Hdr = {
  contentType: "Content-Type",
  run: "Rs-Run",
  step: "Rs-Step",
  policyVersion: "Rs-Policy-Version",
  env: "Rs-Env",
  rows: "Rs-Rows",
  tokens: "Rs-Tokens",
  /** A scored batch's rewards (mean, min, max of its rows): browsing and filtering by reward needs no payload. */
  rewardMean: "Rs-Reward-Mean",
  rewardMin: "Rs-Reward-Min",
  rewardMax: "Rs-Reward-Max",
  schema: "Rs-Schema",
  error: "Rs-Error",
  originalSubject: "Rs-Original-Subject",
  originalSeq: "Rs-Original-Seq",
  actor: "Rs-Actor",
  kind: "Rs-Kind",
  chunk: "Rs-Chunk",
  /** Filler that makes the header block a multiple of 8 bytes (see alignPayload). */
  pad: "Rs-Pad",
  /** The payload did not fit in max_payload: it is this object of the run's blob bucket (streams/large-payload.ts). */
  blob: "Rs-Blob",
  blobBytes: "Rs-Blob-Bytes",
  blobSha256: "Rs-Blob-Sha256",
} as const;

/** JetStream's de-duplication header (what `js.publish(..., { msgID })` sets). */
export const MSG_ID_HEADER = "Nats-Msg-Id";

export type HeaderValues = Partial<Record<keyof typeof Hdr, string | number | undefined>>;

export function makeHeaders(values: HeaderValues): MsgHdrs {
  const h = natsHeaders();
  for (const [k, v] of Object.entries(values)) {
    if (v === undefined) continue;
    // Header values are single-line ASCII on the wire; errors may carry newlines.
    h.set(
      Hdr[k as keyof typeof Hdr],
      String(v)
        .replace(/[\r\n]+/g, " ")
        .slice(0, 1024),
    );
  }
  return h;
}

export function headerRecord(h: MsgHdrs | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  if (!h) return out;
  for (const [k, v] of h) out[k] = v.join(", ");
  return out;
}

/**
 * Pads the header block with an `Rs-Pad` header so its encoded length is a multiple of 8 bytes, and
 * returns that length. Why: a message larger than one socket read is reassembled by the client into a
 * fresh buffer that starts with the header block, so the payload then begins 8-byte aligned and Arrow
 * can decode it in place instead of copying the whole batch first (streams/arrow-codec.ts `aligned`).
 * Call it LAST: any header set afterwards (including the msg-id `js.publish` adds for `{ msgID }`, so
 * put the id in the headers with MSG_ID_HEADER instead) undoes the alignment. Misaligned payloads are
 * still decoded correctly, only with one copy.
 */
export function alignPayload(h: MsgHdrs): number {
  h.delete(Hdr.pad);
  const base = headerBlockBytes(h);
  // The pad line adds "\r\n" + "Rs-Pad" + ": " + value = 10 + value.length bytes; the value is never empty.
  const k = (8 - ((base + 10) % 8)) % 8 || 8;
  h.set(Hdr.pad, "0".repeat(k));
  const total = headerBlockBytes(h);
  if (total % 8 !== 0) throw new Error(`alignPayload: header block is ${total} bytes, not a multiple of 8 (nats header encoding changed?)`);
  return total;
}

/** Bytes of the header block on the wire (the client's own encoding: its toString is the wire text). */
export function headerBlockBytes(h: MsgHdrs): number {
  const text = String(h);
  if (!text.startsWith("NATS/1.0")) throw new Error("headers: cannot see the encoded header block (nats client changed?)");
  return Buffer.byteLength(text, "utf8");
}
