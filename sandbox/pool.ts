// Warm pool: sandboxes started ahead, each with its interpreter already waiting for a program, so a
// request pays a pipe write instead of bwrap + interpreter start. With reuse on (the default) a
// sandbox serves one-shot requests one after another: after each, its supervisor resets it (every
// process killed, tmpfs emptied, IPC removed, its own state checked) and the next request forks a fresh
// interpreter from it; a sandbox whose reset was not clean, or that served `maxExecsPerSandbox`
// requests, is killed and replaced. A session takes a sandbox out of the pool for good.
//
// Size: `target` sandboxes are kept per kind. A request that finds none idle waits for one to come
// back (a reset takes well under a millisecond) or, while fewer than `maxOwned` exist, for a new one
// to start, whichever is first. Sandboxes beyond the target that stay idle for IDLE_TRIM_MS are
// stopped. At most `maxParallelStarts` starts run at once (each a posix_spawn: native-spawn.ts).
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
  /** Requests served by a sandbox that had served one before. */
  reuses: number;
  /** Sandboxes killed after a request because their reset was not clean (or they died). */
  retiredUnclean: number;
  /** Sandboxes killed after serving maxExecsPerSandbox requests. */
  retiredWorn: number;
  /** Sandboxes that came back while their supervisor was still resetting them (the C loop replies first). */
  resetsAfterReply: number;
  /** How long those stayed out of the pool after the reply, in total: what the replies no longer wait for. */
  resetAfterReplyMsTotal: number;
}

export interface PoolOptions {
  /** Sandboxes kept per kind. */
  targets: Record<PoolKind, number>;
  /** Most sandboxes per kind in the pool at once (idle + busy + starting), when requests wait. */
  maxOwned: number;
  maxParallelStarts: number;
  /** Requests one sandbox serves before it is replaced; 1 = no reuse. */
  maxExecsPerSandbox: number;
  /**
   * A sandbox that has just come back is still forking and preparing its next interpreter, and a request
   * handed to it waits for that; back this long, it is taken as ready.
   */
  settleMs: number;
}

const RETRY_AFTER_FAILURE_MS = 1000;
const IDLE_TRIM_MS = 30_000;

interface KindState {
  idle: SandboxProcess[];
  busy: Set<SandboxProcess>;
  starting: number;
  waiters: Waiter[];
}

export class WarmPool {
  private readonly kinds = new Map<PoolKind, KindState>();
  private readonly startSlots: Semaphore;
  private closed = false;
  private retryTimer: NodeJS.Timeout | null = null;
  private trimTimer: NodeJS.Timeout | null = null;
  private readonly idleSince = new WeakMap<SandboxProcess, number>();
  readonly counters: PoolCounters = {
    hits: 0,
    misses: 0,
    started: 0,
    startFailures: 0,
    startMsTotal: 0,
    reuses: 0,
    retiredUnclean: 0,
    retiredWorn: 0,
    resetsAfterReply: 0,
    resetAfterReplyMsTotal: 0,
  };

  constructor(
    private readonly start: (kind: PoolKind) => Promise<SandboxProcess>,
    private readonly opts: PoolOptions,
    private readonly log: Logger,
  ) {
    this.startSlots = new Semaphore(opts.maxParallelStarts);
    for (const k of Object.keys(opts.targets) as PoolKind[]) this.kinds.set(k, { idle: [], busy: new Set(), starting: 0, waiters: [] });
  }

  /** Fills every pool to its target; resolves when the first round of starts has settled. */
  async warm(): Promise<void> {
    const kinds = [...this.kinds.keys()];
    for (const k of kinds) this.refill(k);
    const deadline = Date.now() + 30_000;
    while (Date.now() < deadline && kinds.some((k) => this.kinds.get(k)!.starting > 0)) await new Promise((r) => setTimeout(r, 10));
  }

  idleCount(kind: PoolKind): number {
    return this.kinds.get(kind)?.idle.length ?? 0;
  }

  startingCount(kind: PoolKind): number {
    return this.kinds.get(kind)?.starting ?? 0;
  }

  busyCount(kind: PoolKind): number {
    return this.kinds.get(kind)?.busy.size ?? 0;
  }

  /** A sandbox for one request; give it back with release() (or detach() it for a session). */
  acquire(kind: PoolKind): Promise<SandboxProcess> {
    if (this.closed) return Promise.reject(new SandboxFailure("the sandbox service is stopping"));
    const st = this.kinds.get(kind);
    if (!st) return Promise.reject(new SandboxFailure(`no pool for ${kind}`));
    while (st.idle.length) {
      // Most recently used first (its pages are warm, and the others can age out: trim), but one back long
      // enough to have its next interpreter ready before one that has just come back.
      const s = st.idle.splice(this.settledIndex(st.idle), 1)[0]!;
      if (s.idle) {
        this.counters.hits++;
        if (s.commands > 0) this.counters.reuses++;
        st.busy.add(s);
        return Promise.resolve(s);
      }
    }
    this.counters.misses++;
    return new Promise<SandboxProcess>((resolve, reject) => {
      st.waiters.push({
        resolve: (s) => {
          if (s.commands > 0) this.counters.reuses++;
          st.busy.add(s);
          resolve(s);
        },
        reject,
      });
      this.refill(kind);
    });
  }

  /** Hands a sandbox back after a one-shot request: reused when its reset was clean, else replaced. */
  release(kind: PoolKind, s: SandboxProcess): void {
    const st = this.kinds.get(kind)!;
    const worn = s.commands >= this.opts.maxExecsPerSandbox;
    // Its supervisor reported before resetting: it stays busy until it says whether the reset was clean
    // (a worn one is not waited for: it is replaced either way).
    if (s.resetting && !worn && !this.closed) {
      const t0 = performance.now();
      void s.settled().then(() => {
        this.counters.resetsAfterReply++;
        this.counters.resetAfterReplyMsTotal += performance.now() - t0;
        this.release(kind, s);
      });
      return;
    }
    st.busy.delete(s);
    if (this.closed || !s.alive || !s.idle || !s.clean || worn) {
      if (!this.closed && s.alive) {
        if (worn && s.clean) this.counters.retiredWorn++;
        else if (this.opts.maxExecsPerSandbox > 1) this.counters.retiredUnclean++;
      }
      s.kill();
      // Start the replacement after the reply has gone out (the caller is still on its way there).
      setImmediate(() => this.refill(kind));
      return;
    }
    this.offer(kind, s);
  }

  /** The sandbox leaves the pool for good (a session); the pool starts a replacement. */
  detach(kind: PoolKind, s: SandboxProcess): void {
    this.kinds.get(kind)!.busy.delete(s);
    setImmediate(() => this.refill(kind));
  }

  private offer(kind: PoolKind, s: SandboxProcess): void {
    const st = this.kinds.get(kind)!;
    const waiter = st.waiters.shift();
    if (waiter) {
      waiter.resolve(s);
      return;
    }
    st.idle.push(s);
    this.idleSince.set(s, performance.now());
    if (st.idle.length > this.opts.targets[kind]) this.scheduleTrim();
  }

  /** The most recently used idle sandbox that came back at least settleMs ago, else the most recent. */
  private settledIndex(idle: SandboxProcess[]): number {
    const now = performance.now();
    for (let i = idle.length - 1; i >= 0; i--) if (now - (this.idleSince.get(idle[i]!) ?? 0) >= this.opts.settleMs) return i;
    return idle.length - 1;
  }

  private owned(st: KindState): number {
    return st.idle.length + st.busy.size + st.starting;
  }

  private refill(kind: PoolKind): void {
    if (this.closed) return;
    const st = this.kinds.get(kind)!;
    const target = this.opts.targets[kind];
    let toStart: number;
    if (this.opts.maxExecsPerSandbox <= 1) {
      // No reuse: busy sandboxes die after their request; keep `target` idle plus one per waiter.
      toStart = target + st.waiters.length - (st.idle.length + st.starting);
    } else {
      // Up to the target always; beyond it (up to maxOwned) only for waiters no start is already meant for.
      const forWaiters = Math.min(st.waiters.length - st.starting, this.opts.maxOwned - this.owned(st));
      toStart = Math.max(target - this.owned(st), forWaiters);
    }
    for (let i = 0; i < toStart; i++) void this.startOne(kind);
  }

  private scheduleTrim(): void {
    if (this.trimTimer || this.closed) return;
    this.trimTimer = setTimeout(() => {
      this.trimTimer = null;
      for (const [kind, st] of this.kinds) {
        const extra = st.idle.length - this.opts.targets[kind];
        // The least recently used sit at the front.
        for (const s of st.idle.splice(0, Math.max(0, extra))) s.kill();
      }
    }, IDLE_TRIM_MS);
    this.trimTimer.unref();
  }

  private async startOne(kind: PoolKind): Promise<void> {
    const st = this.kinds.get(kind)!;
    st.starting++;
    let sandbox: SandboxProcess | null = null;
    let failure: Error | null = null;
    const release = await this.startSlots.acquire();
    try {
      if (!this.closed) sandbox = await this.start(kind);
    } catch (e) {
      failure = e as Error;
    } finally {
      release();
      st.starting--;
    }
    if (sandbox) {
      this.counters.started++;
      this.counters.startMsTotal += sandbox.startMs;
      if (this.closed) {
        sandbox.kill();
        return;
      }
      const s = sandbox;
      // A warm sandbox that dies while waiting (OOM killer, operator) leaves the pool and is replaced.
      s.onExit(() => {
        const i = st.idle.indexOf(s);
        if (i >= 0) {
          st.idle.splice(i, 1);
          this.refill(kind);
        }
      });
      this.offer(kind, s);
    } else if (failure && !this.closed) {
      this.counters.startFailures++;
      this.log.error({ kind, err: failure.message }, "sandbox failed to start");
      // Requests must not hang on a machine where sandboxes cannot start: fail the oldest waiter.
      st.waiters.shift()?.reject(failure);
      if (!this.retryTimer && !this.closed) {
        this.retryTimer = setTimeout(() => {
          this.retryTimer = null;
          for (const k of this.kinds.keys()) this.refill(k);
        }, RETRY_AFTER_FAILURE_MS);
        this.retryTimer.unref();
      }
    }
  }

  close(): void {
    this.closed = true;
    if (this.retryTimer) clearTimeout(this.retryTimer);
    if (this.trimTimer) clearTimeout(this.trimTimer);
    for (const st of this.kinds.values()) {
      for (const s of st.idle.splice(0)) s.kill();
      for (const w of st.waiters.splice(0)) w.reject(new SandboxFailure("the sandbox service is stopping"));
    }
  }
}
