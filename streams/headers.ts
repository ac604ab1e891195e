// Header names and content types: they make `nats stream view` / `rollstream inspect` readable
// without knowing our payload formats.
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
  schema: "Rs-Schema",
  error: "Rs-Error",
  originalSubject: "Rs-Original-Subject",
  originalSeq: "Rs-Original-Seq",
  actor: "Rs-Actor",
  kind: "Rs-Kind",
  chunk: "Rs-Chunk",
} as const;

export type HeaderValues = Partial<Record<keyof typeof Hdr, string | number | undefined>>;

export function makeHeaders(values: HeaderValues): MsgHdrs {
  const h = natsHeaders();
  for (const [k, v] of Object.entries(values)) {
    if (v === undefined) continue;
    // Header values are single-line ASCII on the wire; errors may carry newlines.
    h.set(Hdr[k as keyof typeof Hdr], String(v).replace(/[\r\n]+/g, " ").slice(0, 1024));
  }
  return h;
}

export function headerRecord(h: MsgHdrs | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  if (!h) return out;
  for (const [k, v] of h) out[k] = v.join(", ");
  return out;
}
