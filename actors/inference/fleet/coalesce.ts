// Requests to one server that ask, in the same turn of the event loop, for the same prompt with the same sampling
// settings (a task's group of rollouts starting together) go as one HTTP request with n choices: each HTTP request
// costs both processes about a millisecond of CPU, as much as generating a short completion on a small model, and
// the server prefills the shared prompt once. Choice i is sampled with the first request's seed + i. A caller whose
// signal aborts gets its abort at once and its choice is dropped; the request itself is aborted only when every
// caller's signal is. For servers whose generate route takes n (`rollstream serve`).
import type { EngineServer, Segment, SegmentRequest } from "./engine-server.js";

type Opts = { deadlineMs: number; signal?: AbortSignal };

export interface ManyServer extends EngineServer {
  generateMany(req: SegmentRequest, n: number, opts: Opts): Promise<Segment[]>;
  loadAdapter(name: string, dir: string, opts: { deadlineMs: number }): Promise<void>;
  unloadAdapter(name: string, opts: { deadlineMs: number }): Promise<void>;
}

interface Waiter {
  req: SegmentRequest;
  opts: Opts;
  resolve(s: Segment): void;
  reject(e: unknown): void;
  done: boolean;
  /** Removes its abort listener (the signal usually outlives it: an actor-wide one). */
  forget(): void;
}

function keyOf(r: SegmentRequest): string {
  return `${r.cacheKey}|${r.adapter ?? ""}|${r.maxTokens}|${r.temperature}|${r.topP}|${r.topK}|${r.stopTokenIds.join(",")}|${r.tokenIds.join(",")}`;
}

export class CoalescingServer implements EngineServer {
  private readonly pending = new Map<string, Waiter[]>();

  constructor(private readonly inner: ManyServer) {}

  get url(): string {
    return this.inner.url;
  }

  loadWeights(dir: string, version: number | string, opts: { deadlineMs: number }): Promise<void> {
    return this.inner.loadWeights(dir, version, opts);
  }

  loadAdapter(name: string, dir: string, opts: { deadlineMs: number }): Promise<void> {
    return this.inner.loadAdapter(name, dir, opts);
  }

  unloadAdapter(name: string, opts: { deadlineMs: number }): Promise<void> {
    return this.inner.unloadAdapter(name, opts);
  }

  healthy(opts: { deadlineMs: number }): Promise<boolean> {
    return this.inner.healthy(opts);
  }

  generate(req: SegmentRequest, opts: Opts): Promise<Segment> {
    if (opts.signal?.aborted) return Promise.reject(opts.signal.reason);
    const key = keyOf(req);
    return new Promise<Segment>((resolve, reject) => {
      let list = this.pending.get(key);
      if (!list) {
        list = [];
        this.pending.set(key, list);
        setImmediate(() => this.flush(key));
      }
      list.push({ req, opts, resolve, reject, done: false, forget: () => undefined });
    });
  }

  private flush(key: string): void {
    const all = this.pending.get(key)!;
    this.pending.delete(key);
    // Aborted while waiting for this turn: ended now, not asked for.
    for (const w of all) if (w.opts.signal?.aborted) this.settle(w, () => w.reject(w.opts.signal!.reason));
    const list = all.filter((w) => !w.done);
    if (list.length === 0) return;
    const batch = new AbortController();
    let live = list.length;
    for (const w of list) {
      const signal = w.opts.signal;
      if (!signal) continue;
      const onAbort = () => {
        this.settle(w, () => w.reject(signal.reason));
        if (--live === 0) batch.abort(signal.reason);
      };
      signal.addEventListener("abort", onAbort, { once: true });
      w.forget = () => signal.removeEventListener("abort", onAbort);
    }
    const first = list[0]!;
    const opts = { deadlineMs: Math.max(...list.map((w) => w.opts.deadlineMs)), signal: batch.signal };
    const call = list.length === 1 ? this.inner.generate(first.req, opts).then((s) => [s]) : this.inner.generateMany(first.req, list.length, opts);
    call.then(
      (segs) => list.forEach((w, i) => this.settle(w, () => w.resolve(segs[i]!))),
      (e: unknown) => list.forEach((w) => this.settle(w, () => w.reject(e))),
    );
  }

  private settle(w: Waiter, how: () => void): void {
    if (w.done) return;
    w.done = true;
    w.forget();
    how();
  }
}
