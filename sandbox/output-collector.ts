// Collects one output stream (stdout or stderr) of one command, keeping at most `cap` bytes of what
// the program wrote while still watching the stream's tail for the supervisor's end marker.
export class OutputCollector {
  private chunks: Buffer[] = [];
  private stored = 0;
  /** Every byte received for this command, including the end marker once it arrives. */
  total = 0;
  private tail: Buffer = Buffer.alloc(0);

  /** `slack` is room for the end marker, so that a program writing exactly `cap` bytes is not cut. */
  constructor(
    private readonly cap: number,
    private readonly slack: number,
  ) {}

  push(buf: Buffer): void {
    this.total += buf.length;
    const room = this.cap + this.slack - this.stored;
    if (room > 0) {
      const part = buf.length <= room ? buf : buf.subarray(0, room);
      this.chunks.push(part);
      this.stored += part.length;
    }
    this.tail = Buffer.concat([this.tail, buf.length > 128 ? buf.subarray(buf.length - 128) : buf]);
    if (this.tail.length > 128) this.tail = this.tail.subarray(this.tail.length - 128);
  }

  /** More than the cap written: the caller stops the command. */
  get overflowing(): boolean {
    return this.total > this.cap + this.slack;
  }

  endsWith(marker: Buffer): boolean {
    return this.tail.length >= marker.length && this.tail.subarray(this.tail.length - marker.length).equals(marker);
  }

  /** The program's output without the marker, cut at the cap. */
  finish(marker: Buffer | null): { text: string; truncated: boolean } {
    const hasMarker = marker !== null && this.endsWith(marker);
    const programBytes = this.total - (hasMarker && marker ? marker.length : 0);
    const keep = Math.min(programBytes, this.cap, this.stored);
    const data = Buffer.concat(this.chunks, this.stored).subarray(0, keep);
    return { text: data.toString("utf8"), truncated: programBytes > this.cap };
  }
}
