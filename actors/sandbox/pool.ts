// Warm pool: sandboxes started ahead, each with its interpreter already waiting for a program, so a
// request pays a pipe write instead of bwrap + interpreter start. Every sandbox serves one request
// (or one session) and is then discarded; the pool refills in the background. A request that finds
// the pool empty waits for the next sandbox to come up (a cold start), in arrival order.
import type { Logger } from "pino";
import { Semaphore } from "./semaphore.js";
import { SandboxFailure, type PrestartKind, type SandboxProcess } from "./sandbox-process.js";

export type PoolKind = Exclude<PrestartKind, "">;

interface Waiter {
  resolve: (s: SandboxProcess) => void;
  reject: (e: Error) => void;
}

export interface PoolCounters {
  hits: number;
  misses: number;
  started: number;
  startFailures: number;
  startMsTotal: number;
}

const RETRY_AFTER_FAILURE_MS = 1000;

export class WarmPool {
  private readonly idle = new Map<PoolKind, SandboxProcess[]>();
  private readonly starting = new Map<PoolKind, number>();
  private readonly waiters = new Map<PoolKind, Waiter[]>();
  private readonly startSlots: Semaphore;
  private closed = false;
  private retryTimer: NodeJS.Timeout | null = null;
  readonly counters: PoolCounters = { hits: 0, misses: 0, started: 0, startFailures: 0, startMsTotal: 0 };

  constructor(
    private readonly start: (kind: PoolKind) => Promise<SandboxProcess>,
    private readonly targets: Record<PoolKind, number>,
    maxParallelStarts: number,
    private readonly log: Logger,
  ) {
    this.startSlots = new Semaphore(maxParallelStarts);
    for (const k of Object.keys(targets) as PoolKind[]) {
      this.idle.set(k, []);
      this.starting.set(k, 0);
      this.waiters.set(k, []);
    }
  }

  /** Fills every pool to its target; resolves when the first round of starts has settled. */
  async warm(): Promise<void> {
    const kinds = Object.keys(this.targets) as PoolKind[];
    for (const k of kinds) this.refill(k);
    const deadline = Date.now() + 30_000;
    while (Date.now() < deadline && kinds.some((k) => (this.starting.get(k) ?? 0) > 0)) await new Promise((r) => setTimeout(r, 10));
  }

  idleCount(kind: PoolKind): number {
    return this.idle.get(kind)?.length ?? 0;
  }

  startingCount(kind: PoolKind): number {
    return this.starting.get(kind) ?? 0;
  }

  acquire(kind: PoolKind): Promise<SandboxProcess> {
    if (this.closed) return Promise.reject(new SandboxFailure("the sandbox service is stopping"));
    const idle = this.idle.get(kind);
    if (!idle) return Promise.reject(new SandboxFailure(`no pool for ${kind}`));
    while (idle.length) {
      const s = idle.shift()!;
      if (s.idle) {
        this.counters.hits++;
        // Spawning blocks the event loop for a few ms (fork of this process): not while the request
        // that just took the sandbox is running. The caller calls replenish() when it is done; the
        // timer is a fallback for callers that never do.
        this.replenishLater(kind);
        return Promise.resolve(s);
      }
    }
    this.counters.misses++;
    return new Promise<SandboxProcess>((resolve, reject) => {
      this.waiters.get(kind)!.push({ resolve, reject });
      this.refill(kind);
    });
  }

  private replenishTimers = new Map<PoolKind, NodeJS.Timeout>();

  private replenishLater(kind: PoolKind): void {
    if (this.replenishTimers.has(kind)) return;
    const t = setTimeout(() => this.replenish(kind), 50);
    t.unref();
    this.replenishTimers.set(kind, t);
  }

  /** Starts sandboxes until the pool is back at its target (call when a request is done). */
  replenish(kind: PoolKind): void {
    const t = this.replenishTimers.get(kind);
    if (t) clearTimeout(t);
    this.replenishTimers.delete(kind);
    this.refill(kind);
  }

  private refill(kind: PoolKind): void {
    if (this.closed) return;
    const want = this.targets[kind] + this.waiters.get(kind)!.length;
    const have = this.idle.get(kind)!.length + this.starting.get(kind)!;
    for (let i = have; i < want; i++) void this.startOne(kind);
  }

  private async startOne(kind: PoolKind): Promise<void> {
    this.starting.set(kind, this.starting.get(kind)! + 1);
    let sandbox: SandboxProcess | null = null;
    let failure: Error | null = null;
    const release = await this.startSlots.acquire();
    try {
      if (!this.closed) sandbox = await this.start(kind);
    } catch (e) {
      failure = e as Error;
    } finally {
      release();
      this.starting.set(kind, this.starting.get(kind)! - 1);
    }
    if (sandbox) {
      this.counters.started++;
      this.counters.startMsTotal += sandbox.startMs;
      if (this.closed) {
        sandbox.kill();
        return;
      }
      const waiter = this.waiters.get(kind)!.shift();
      if (waiter) waiter.resolve(sandbox);
      else {
        const idle = this.idle.get(kind)!;
        idle.push(sandbox);
        const s = sandbox;
        // A warm sandbox that dies while waiting (OOM killer, operator) leaves the pool and is replaced.
        s.onExit(() => {
          const i = idle.indexOf(s);
          if (i >= 0) {
            idle.splice(i, 1);
            this.refill(kind);
          }
        });
      }
    } else if (failure && !this.closed) {
      this.counters.startFailures++;
      this.log.error({ kind, err: failure.message }, "sandbox failed to start");
      // Requests must not hang on a machine where sandboxes cannot start: fail the oldest waiter.
      this.waiters.get(kind)!.shift()?.reject(failure);
      if (!this.retryTimer && !this.closed) {
        this.retryTimer = setTimeout(() => {
          this.retryTimer = null;
          for (const k of Object.keys(this.targets) as PoolKind[]) this.refill(k);
        }, RETRY_AFTER_FAILURE_MS);
        this.retryTimer.unref();
      }
    }
  }

  close(): void {
    this.closed = true;
    if (this.retryTimer) clearTimeout(this.retryTimer);
    for (const t of this.replenishTimers.values()) clearTimeout(t);
    for (const [, list] of this.idle) for (const s of list.splice(0)) s.kill();
    for (const [, list] of this.waiters) for (const w of list.splice(0)) w.reject(new SandboxFailure("the sandbox service is stopping"));
  }
}
