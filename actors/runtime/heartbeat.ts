// What this actor process is doing, written to the run's health bucket every couple of seconds (DESIGN §2):
// working on what, waiting on what, since when, and how its time splits between work and each kind of
// wait (the idle ratios, also exported to Prometheus).
//
// Work and waits are activities that begin and end, possibly many at once (inference handles several
// tasks while it fetches new weights). An activity started while another one runs (in its async context)
// is nested in it: a task whose rubric waits on the sandbox is waiting, not working, for that time. The
// process is busy while any innermost activity is work; otherwise it waits on the innermost waits, a
// specific one (weights, the sandbox) before a wait for input (the next task). Time before the first
// activity is start-up, counted in neither.
import { AsyncLocalStorage } from "node:async_hooks";
import type { Gauge } from "prom-client";
import type { EngineFigures, Heartbeat, HealthBoard, HealthEntry, LogLine, RemoteEnvHealth } from "../../streams/index.js";
import type { ActorMetrics } from "./metrics.js";

/** How often a heartbeat is written. A config knob to wire (e.g. actors.heartbeatMs); doctor's default staleness is 5 of these. */
export const HEARTBEAT_INTERVAL_MS = 2_000;

interface Activity {
  kind: "work" | "wait";
  /** A wait's reason ("weights", "sandbox", "tasks"): the label its time is counted under. */
  reason: string;
  what: string;
  detail: string;
  idle: boolean;
  since: number;
  parent: Activity | undefined;
  children: number;
}

export interface WaitOptions {
  /** Shown after the reason: "v7" makes "weights v7". */
  detail?: string;
  /** A wait for input (the next task or message): the actor is idle, which is never stuck. */
  idle?: boolean;
}

/** An activity marked by hand rather than around a function: end it when it is over. */
export interface Mark {
  end(): void;
}

export interface HealthOptions {
  actor: string;
  instance: string;
  board: Pick<HealthBoard, "beat" | "exit" | "read">;
  /** The process's last warn/error log line (logger.ts). */
  lastLog: () => LogLine | null;
  metrics?: ActorMetrics;
  intervalMs?: number;
  now?: () => number;
  /** A heartbeat that could not be written (the server is away): nothing else to do about it. */
  onBeatError?: (e: Error) => void;
}

export class Health {
  private readonly scope = new AsyncLocalStorage<Activity>();
  private readonly active = new Set<Activity>();
  private readonly now: () => number;
  private readonly startedAt: number;
  private begun = false;
  private drainingSince: number | null = null;
  private quietSince: number;
  private lastTick: number;
  private busyMs = 0;
  private readonly waitMs: Record<string, number> = {};
  private inFlightCount = 0;
  private blockedBy: string | null = null;
  private engine: (() => EngineFigures) | null = null;
  private remote: (() => RemoteEnvHealth[]) | null = null;
  private timer: NodeJS.Timeout | null = null;
  private beating: Promise<void> | null = null;
  /** Stopped or exited: a signal that arrives later must not write the key again. */
  private closed = false;
  private readonly idleGauge?: Gauge;
  private readonly busyGauge?: Gauge;
  readonly intervalMs: number;

  constructor(private readonly o: HealthOptions) {
    this.now = o.now ?? Date.now;
    this.startedAt = this.quietSince = this.lastTick = this.now();
    this.intervalMs = o.intervalMs ?? HEARTBEAT_INTERVAL_MS;
    this.idleGauge = o.metrics?.gauge("idle_ratio", "share of busy + waiting time spent waiting, by what was waited on", ["reason"]);
    this.busyGauge = o.metrics?.gauge("busy_ratio", "share of busy + waiting time spent working");
  }

  /** Marks work in progress until the mark ends. */
  working(what: string): Mark {
    return this.begin(workOf(what)).mark;
  }

  /** Marks a wait on `reason` until the mark ends. */
  waiting(reason: string, opts: WaitOptions = {}): Mark {
    return this.begin(waitOf(reason, opts)).mark;
  }

  /** Runs fn as work; what it waits on inside counts as waiting. */
  work<T>(what: string, fn: () => Promise<T> | T): Promise<T> {
    return this.around(this.begin(workOf(what)), fn);
  }

  /** Runs fn as a wait on `reason`. */
  wait<T>(reason: string, fn: () => Promise<T> | T, opts: WaitOptions = {}): Promise<T> {
    return this.around(this.begin(waitOf(reason, opts)), fn);
  }

  /** Replaces the detail of the innermost activity the calling code runs in ("for step 12 (3 of 8)" as samples arrive). */
  note(detail: string): void {
    const a = this.scope.getStore();
    if (a) a.detail = detail;
  }

  /** Every instance's record in the run's health bucket (this one's included). */
  peers(): Promise<HealthEntry[]> {
    return this.o.board.read();
  }

  /** Why the actor cannot go on (null: it can); written at once, and in every heartbeat while it lasts. */
  blocked(reason: string | null): void {
    if (reason === this.blockedBy) return;
    this.blockedBy = reason;
    if (this.timer) this.beat();
  }

  /** The remote environment servers' last health checks, written in every heartbeat (null: none). */
  remoteEnvs(report: (() => RemoteEnvHealth[]) | null): void {
    this.remote = report;
  }

  /** An inference engine's scheduler figures, written in every heartbeat (null: no more). */
  engineFigures(figures: (() => EngineFigures) | null): void {
    this.engine = figures;
  }

  /** Messages being handled now (the consume loop keeps it). */
  inFlight(n: number): void {
    this.inFlightCount = Math.max(0, n);
  }

  /** The actor was told to stop: it finishes what it has and returns. */
  draining(): void {
    if (this.drainingSince !== null) return;
    this.drainingSince = this.now();
    this.beat();
  }

  /** Writes a heartbeat now and every interval after. */
  start(): void {
    if (this.timer || this.closed) return;
    this.beat();
    this.timer = setInterval(() => this.beat(), this.intervalMs);
    this.timer.unref();
  }

  /** Stops the heartbeats; the key stays with the last one (a process that failed leaves its last words). */
  async stop(final = true): Promise<void> {
    this.closed = true;
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    await this.beating;
    if (final) await this.o.board.beat(this.snapshot()).catch((e: Error) => this.o.onBeatError?.(e));
  }

  /** A clean exit: heartbeats stop, the live key goes, the final accounting stays (HealthBoard.exit). */
  async exit(): Promise<void> {
    await this.stop(false);
    await this.o.board.exit({ ...this.snapshot(), exitedAt: new Date(this.now()).toISOString() }).catch((e: Error) => this.o.onBeatError?.(e));
  }

  snapshot(): Heartbeat {
    const now = this.now();
    this.tick(now);
    const c = this.current();
    const total = this.busyMs + Object.values(this.waitMs).reduce((a, b) => a + b, 0);
    const idleRatio: Record<string, number> = {};
    for (const [reason, w] of Object.entries(this.waitMs)) idleRatio[reason] = total > 0 ? Math.min(1, w / total) : 0;
    const draining = this.drainingSince !== null;
    return {
      actor: this.o.actor,
      instance: this.o.instance,
      pid: process.pid,
      state: draining ? "draining" : c.state,
      what: c.what,
      idle: !draining && c.idle,
      since: new Date(draining ? this.drainingSince! : c.since).toISOString(),
      inFlight: this.inFlightCount,
      busyMs: Math.round(this.busyMs),
      waitMs: Object.fromEntries(Object.entries(this.waitMs).map(([k, v]) => [k, Math.round(v)])),
      idleRatio,
      lastLog: this.o.lastLog(),
      time: new Date(now).toISOString(),
      intervalMs: this.intervalMs,
      ...(this.blockedBy ? { blocked: this.blockedBy } : {}),
      ...(this.engine ? { engine: this.engine() } : {}),
      ...(this.remote ? { remoteEnvs: this.remote() } : {}),
    };
  }

  private beat(): void {
    if (this.beating || this.closed) return; // the last one is still on its way: never pile up behind a slow server
    const hb = this.snapshot();
    if (this.idleGauge && this.busyGauge) {
      const total = hb.busyMs + Object.values(hb.waitMs).reduce((a, b) => a + b, 0);
      this.busyGauge.set(total > 0 ? hb.busyMs / total : 0);
      for (const [reason, r] of Object.entries(hb.idleRatio)) this.idleGauge.set({ reason }, r);
    }
    this.beating = this.o.board
      .beat(hb)
      .catch((e: Error) => this.o.onBeatError?.(e))
      .finally(() => (this.beating = null));
  }

  private begin(a: NewActivity): { activity: Activity; mark: Mark } {
    const now = this.now();
    this.tick(now);
    this.begun = true;
    const activity: Activity = { ...a, since: now, parent: this.scope.getStore(), children: 0 };
    if (activity.parent && this.active.has(activity.parent)) activity.parent.children++;
    this.active.add(activity);
    let ended = false;
    const mark = {
      end: () => {
        if (ended) return;
        ended = true;
        const t = this.now();
        this.tick(t);
        this.active.delete(activity);
        if (activity.parent && activity.parent.children > 0) activity.parent.children--;
        if (this.active.size === 0) this.quietSince = t;
      },
    };
    return { activity, mark };
  }

  private async around<T>({ activity, mark }: { activity: Activity; mark: Mark }, fn: () => Promise<T> | T): Promise<T> {
    // The activity is the async context of fn: what fn starts is nested in it.
    try {
      return await this.scope.run(activity, fn);
    } finally {
      mark.end();
    }
  }

  /** Counts the time since the last tick as busy or as a wait on the reason shown now. */
  private tick(now: number): void {
    const dt = Math.max(0, now - this.lastTick);
    this.lastTick = now;
    if (!this.begun || dt === 0) return;
    const c = this.current();
    if (c.state === "waiting") this.waitMs[c.reason] = (this.waitMs[c.reason] ?? 0) + dt;
    else this.busyMs += dt;
  }

  private current(): { state: "starting" | "working" | "waiting"; what: string; since: number; idle: boolean; reason: string } {
    let work: Activity | undefined;
    let works = 0;
    let wait: Activity | undefined;
    for (const a of this.active) {
      if (a.children > 0) continue;
      if (a.kind === "work") {
        works++;
        if (!work || a.since < work.since) work = a;
      } else if (!wait || (wait.idle && !a.idle) || (wait.idle === a.idle && a.since < wait.since)) {
        wait = a;
      }
    }
    const label = (a: Activity) => (a.detail ? `${a.what} ${a.detail}` : a.what);
    if (work) return { state: "working", what: works > 1 ? `${label(work)} (+${works - 1} more)` : label(work), since: work.since, idle: false, reason: "" };
    if (wait) return { state: "waiting", what: label(wait), since: wait.since, idle: wait.idle, reason: wait.reason };
    // Between activities the actor runs code nobody labelled: busy, as far as anyone can tell.
    if (this.begun) return { state: "working", what: "", since: this.quietSince, idle: false, reason: "" };
    return { state: "starting", what: "", since: this.startedAt, idle: false, reason: "" };
  }
}

type NewActivity = Omit<Activity, "since" | "parent" | "children">;

function workOf(what: string): NewActivity {
  return { kind: "work", reason: "", what, detail: "", idle: false };
}

function waitOf(reason: string, opts: WaitOptions): NewActivity {
  return { kind: "wait", reason, what: reason, detail: opts.detail ?? "", idle: opts.idle === true };
}
