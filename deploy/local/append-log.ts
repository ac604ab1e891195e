// A file that train appends to (an actor's log, metrics.jsonl, steps.jsonl) and that survives a full disk.
// A write that fails for want of room is undone to the last whole write (no torn line), kept in memory
// (up to a bound, oldest dropped first and counted), and written again once the disk has room; the owner
// hears once that the disk is full and once that it has room again. Nothing throws: a full run folder
// must not take train, or an actor whose output train pipes here, down with it.
import { closeSync, fstatSync, ftruncateSync, openSync, writeSync } from "node:fs";
import { isNoRoomOnDisk } from "../../streams/index.js";

export interface DiskFullWatcher {
  /** The first write that found no room (err: its cause). */
  full(path: string, err: Error): void;
  /** Room again: the writes kept meanwhile are on disk, save `dropped` bytes past the bound. */
  back(path: string, keptBytes: number, droppedBytes: number): void;
}

const RETRY_MS = 2_000;

export class AppendLog {
  private fd: number | null = null;
  private pending: Buffer[] = [];
  private pendingBytes = 0;
  private droppedBytes = 0;
  private keptBytes = 0;
  private retry: NodeJS.Timeout | null = null;

  constructor(
    readonly path: string,
    private readonly watcher: DiskFullWatcher,
    /** Bytes kept in memory while the disk is full. */
    private readonly maxPendingBytes = 8 * 1024 * 1024,
  ) {}

  get full(): boolean {
    return this.retry !== null;
  }

  write(chunk: string | Buffer): void {
    const buf = typeof chunk === "string" ? Buffer.from(chunk) : chunk;
    if (this.full) {
      this.keep(buf);
      return;
    }
    try {
      this.append(buf);
    } catch (e) {
      if (!isNoRoomOnDisk(e)) throw e;
      this.keep(buf);
      this.retry = setInterval(() => this.flush(), RETRY_MS);
      this.retry.unref();
      this.watcher.full(this.path, e as Error);
    }
  }

  /** Writes what was kept; stays full (and keeps it) while there is still no room. */
  flush(): void {
    while (this.pending.length > 0) {
      try {
        this.append(this.pending[0]!);
      } catch (e) {
        if (isNoRoomOnDisk(e)) return;
        throw e;
      }
      const done = this.pending.shift()!;
      this.pendingBytes -= done.length;
      this.keptBytes += done.length;
    }
    if (this.retry) {
      clearInterval(this.retry);
      this.retry = null;
      this.watcher.back(this.path, this.keptBytes, this.droppedBytes);
      this.keptBytes = this.droppedBytes = 0;
    }
  }

  close(): void {
    if (this.full) this.flush();
    if (this.retry) clearInterval(this.retry);
    this.retry = null;
    if (this.fd !== null) closeSync(this.fd);
    this.fd = null;
  }

  private keep(buf: Buffer): void {
    this.pending.push(buf);
    this.pendingBytes += buf.length;
    while (this.pendingBytes > this.maxPendingBytes && this.pending.length > 1) {
      const old = this.pending.shift()!;
      this.pendingBytes -= old.length;
      this.droppedBytes += old.length;
    }
  }

  /** All of `buf` or nothing: a short write is cut back off, so the file never ends in half a line. */
  private append(buf: Buffer): void {
    this.fd ??= openSync(this.path, "a");
    const before = fstatSync(this.fd).size;
    try {
      for (let off = 0; off < buf.length; ) off += writeSync(this.fd, buf, off, buf.length - off);
    } catch (e) {
      try {
        ftruncateSync(this.fd, before);
      } catch {
        /* the cut is best effort: a read of the file drops a torn last line anyway */
      }
      throw e;
    }
  }
}
