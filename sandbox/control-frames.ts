// Framing of the host <-> supervisor control channel: a frame is a 4-byte big-endian length and a
// list of fields, each a 4-byte big-endian length + bytes. Chosen over JSON so that the in-sandbox
// supervisor needs no json import (its start cost is paid by every one-shot request).
export function encodeFrame(fields: Array<string | Buffer | number>): Buffer {
  const parts: Buffer[] = [Buffer.alloc(4)];
  let total = 0;
  for (const f of fields) {
    const b = Buffer.isBuffer(f) ? f : Buffer.from(String(f), "utf8");
    const len = Buffer.alloc(4);
    len.writeUInt32BE(b.length, 0);
    parts.push(len, b);
    total += 4 + b.length;
  }
  parts[0]!.writeUInt32BE(total, 0);
  return Buffer.concat(parts, 4 + total);
}

/** Accumulates bytes and yields complete frames (each as its list of fields). */
export class FrameReader {
  private buf: Buffer = Buffer.alloc(0);

  push(d: Buffer): Buffer[][] {
    this.buf = this.buf.length ? Buffer.concat([this.buf, d]) : d;
    const frames: Buffer[][] = [];
    while (this.buf.length >= 4) {
      const len = this.buf.readUInt32BE(0);
      if (this.buf.length < 4 + len) break;
      const body = this.buf.subarray(4, 4 + len);
      this.buf = this.buf.subarray(4 + len);
      const fields: Buffer[] = [];
      let i = 0;
      while (i + 4 <= body.length) {
        const n = body.readUInt32BE(i);
        if (i + 4 + n > body.length) throw new Error("malformed control frame");
        fields.push(body.subarray(i + 4, i + 4 + n));
        i += 4 + n;
      }
      frames.push(fields);
    }
    return frames;
  }
}
