// The one SHA-256 helper: object-store payloads, blobs and checkpoints are all checked with it.
import { createHash } from "node:crypto";

export function sha256Hex(data: Uint8Array | string): string {
  return createHash("sha256").update(data).digest("hex");
}
