// What train says about the run folder's disk: one line when a file it writes there (an actor's log,
// metrics.jsonl, steps.jsonl) first finds no room, one when every such file has caught up. The actors
// meanwhile wait for room where they must (a checkpoint) and go on where they can.
import { relative } from "node:path";
import type { DiskFullWatcher } from "../../deploy/local/append-log.js";

export class DiskReport implements DiskFullWatcher {
  private readonly waiting = new Set<string>();
  private kept = 0;
  private dropped = 0;

  constructor(
    private readonly runDir: string,
    private readonly say: (line: string) => void,
  ) {}

  full(path: string, err: Error): void {
    if (this.waiting.size === 0) {
      const code = (err as { code?: string }).code ?? err.message;
      this.say(
        `disk full: no room left in ${this.runDir} (${code} writing ${relative(this.runDir, path)}); the run waits for room where it must and keeps the rest in memory: free space and it goes on`,
      );
    }
    this.waiting.add(path);
  }

  back(path: string, keptBytes: number, droppedBytes: number): void {
    this.kept += keptBytes;
    this.dropped += droppedBytes;
    if (!this.waiting.delete(path) || this.waiting.size > 0) return;
    const lost = this.dropped > 0 ? `, ${kib(this.dropped)} of actor output dropped past the memory bound` : "";
    this.say(`disk has room again in ${this.runDir}: ${kib(this.kept)} kept meanwhile written${lost}`);
    this.kept = this.dropped = 0;
  }
}

const kib = (n: number) => `${(n / 1024).toFixed(1)} KiB`;
