// The executor the NATS service uses: a SandboxExecutor on a worker thread (executor-worker.ts), behind
// the same methods. Starting a sandbox forks this whole process (bwrap), and a burst of starts — a pool
// refill, sandboxes retired after maxExecsPerSandbox, cold starts under load — would otherwise hold up
// the event loop that receives requests and sends replies. Here it holds up the worker's loop only; the
// service's loop just relays messages. The worker also owns the sandboxes' lifetime: bwrap runs with
// --die-with-parent, which the kernel ties to the thread that spawned it, so if the worker dies its
// sandboxes die with it.
import { Worker } from "node:worker_threads";
import type { Level, Logger } from "pino";
import type { SandboxBatchRequest, SandboxBatchResult, SandboxExecRequest, SandboxExecResult } from "../environments/api/sandbox.js";
import { SandboxRequestError } from "./errors.js";
import type { IsolationReport } from "./executor.js";
import { SandboxFailure } from "./sandbox-process.js";
import type { SessionOptions } from "./sessions.js";
import { parseSandboxSettings, type SandboxSettings, type SandboxSettingsInput } from "./settings.js";
import type { WireError, WorkerCall, WorkerEvent, WorkerInit } from "./worker-protocol.js";

/** What the service needs of an executor, in process (SandboxExecutor) or on a worker thread. */
export interface SandboxBackend {
  readonly settings: SandboxSettings;
  readonly isolation: IsolationReport;
  exec(req: SandboxExecRequest): Promise<SandboxExecResult>;
  execBatch(req: SandboxBatchRequest): Promise<SandboxBatchResult>;
  openSession(id: string, opts?: SessionOptions): Promise<void>;
  sessionExec(id: string, req: SandboxExecRequest): Promise<SandboxExecResult>;
  closeSession(id: string): boolean | Promise<boolean>;
  stats(): Record<string, number>;
  /** Host pids of the live sandboxes' bwrap processes (diagnostics, tests). */
  sandboxPids(): number[] | Promise<number[]>;
  setOutputCeiling(bytes: number): void;
  drain(ms: number): Promise<void>;
  close(): Promise<void>;
}

type CallBody = WorkerCall extends infer C ? (C extends { id: number } ? Omit<C, "id"> : never) : never;

function fromWire(e: WireError): Error {
  if (e.kind === "request") return new SandboxRequestError(e.code, e.message);
  return e.kind === "failure" ? new SandboxFailure(e.message) : new Error(e.message);
}

export class ThreadedExecutor implements SandboxBackend {
  private nextId = 1;
  private readonly pending = new Map<number, { resolve: (v: unknown) => void; reject: (e: Error) => void }>();
  private lastStats: Record<string, number>;
  private dead: string | null = null;
  private markDied: (why: string) => void = () => undefined;
  /** Resolves, with the reason, if the worker thread dies before close(): the executor is gone for good. */
  readonly died = new Promise<string>((resolve) => (this.markDied = resolve));
  private closing: Promise<void> | null = null;

  private constructor(
    private readonly worker: Worker,
    readonly settings: SandboxSettings,
    readonly isolation: IsolationReport,
    stats: Record<string, number>,
    private readonly log: Logger,
  ) {
    this.lastStats = stats;
    worker.on("message", (ev: WorkerEvent) => this.onEvent(ev));
    worker.on("error", (e) => this.onDeath(`failed: ${e.message}`));
    worker.on("exit", (code) => this.onDeath(`exited with code ${code}`));
  }

  /** Starts the worker and waits until its executor has probed isolation and warmed the pool. */
  static async create(input: SandboxSettings | SandboxSettingsInput, log: Logger): Promise<ThreadedExecutor> {
    const settings = parseSandboxSettings(input);
    const init: WorkerInit = { settings, logLevel: log.level };
    const worker = new Worker(new URL("./executor-worker.js", import.meta.url), { workerData: init, execArgv: workerExecArgv() });
    // Until it is ready, only the start-up outcome and log lines matter; the listeners go once it is.
    let onMessage: (ev: WorkerEvent) => void = () => undefined;
    let onError: (e: Error) => void = () => undefined;
    let onExit: (code: number) => void = () => undefined;
    try {
      const ready = await new Promise<Extract<WorkerEvent, { t: "ready" }>>((resolve, reject) => {
        onMessage = (ev) => {
          if (ev.t === "log") relayLog(log, ev.line);
          else if (ev.t === "ready") resolve(ev);
          else if (ev.t === "startFailed") reject(new Error(ev.message));
        };
        onError = reject;
        onExit = (code) => reject(new Error(`the sandbox worker thread exited (code ${code}) before it was ready`));
        worker.on("message", onMessage);
        worker.on("error", onError);
        worker.on("exit", onExit);
      });
      return new ThreadedExecutor(worker, settings, ready.isolation, ready.stats, log);
    } catch (e) {
      await worker.terminate().catch(() => undefined);
      throw e;
    } finally {
      worker.off("message", onMessage);
      worker.off("error", onError);
      worker.off("exit", onExit);
    }
  }

  private onEvent(ev: WorkerEvent): void {
    switch (ev.t) {
      case "log":
        relayLog(this.log, ev.line);
        return;
      case "stats":
        this.lastStats = ev.stats;
        return;
      case "reply":
      case "error": {
        this.lastStats = ev.stats;
        const p = this.pending.get(ev.id);
        if (!p) return;
        this.pending.delete(ev.id);
        if (ev.t === "reply") p.resolve(ev.value);
        else p.reject(fromWire(ev.error));
        return;
      }
      default:
        return;
    }
  }

  private onDeath(why: string): void {
    if (this.dead) return;
    this.dead = `the sandbox worker thread ${why}`;
    if (!this.closing) {
      this.log.error({ why }, "sandbox worker thread died: its sandboxes died with it");
      this.markDied(this.dead);
    }
    for (const p of this.pending.values()) p.reject(new SandboxFailure(this.dead));
    this.pending.clear();
  }

  private call<T>(body: CallBody): Promise<T> {
    if (this.dead) return Promise.reject(new SandboxFailure(this.dead));
    const id = this.nextId++;
    return new Promise<T>((resolve, reject) => {
      this.pending.set(id, { resolve: resolve as (v: unknown) => void, reject });
      this.worker.postMessage({ ...body, id } as WorkerCall);
    });
  }

  exec(req: SandboxExecRequest): Promise<SandboxExecResult> {
    return this.call({ op: "exec", req });
  }

  execBatch(req: SandboxBatchRequest): Promise<SandboxBatchResult> {
    return this.call({ op: "execBatch", req });
  }

  openSession(sessionId: string, opts: SessionOptions = {}): Promise<void> {
    return this.call({ op: "openSession", sessionId, opts });
  }

  sessionExec(sessionId: string, req: SandboxExecRequest): Promise<SandboxExecResult> {
    return this.call({ op: "sessionExec", sessionId, req });
  }

  closeSession(sessionId: string): Promise<boolean> {
    return this.call({ op: "closeSession", sessionId });
  }

  /** The worker's counters as of its last reply or its last once-a-second report. */
  stats(): Record<string, number> {
    return this.lastStats;
  }

  setOutputCeiling(bytes: number): void {
    void this.call({ op: "setOutputCeiling", bytes }).catch(() => undefined);
  }

  sandboxPids(): Promise<number[]> {
    return this.call({ op: "sandboxPids" });
  }

  /** Ends the worker thread at once, without draining: its sandboxes die with it (tests; an emergency stop). */
  async terminateWorker(): Promise<void> {
    await this.worker.terminate();
  }

  drain(ms: number): Promise<void> {
    return this.call({ op: "drain", ms });
  }

  /** Kills every sandbox (in the worker), then ends the worker. */
  close(): Promise<void> {
    this.closing ??= (async () => {
      await this.call({ op: "close" }).catch(() => undefined);
      await this.worker.terminate().catch(() => undefined);
    })();
    return this.closing;
  }
}

/**
 * The process's Node flags minus those that only make sense for an entry script: a worker refuses to start
 * under `--input-type` (a service started with `node --input-type=module -e ...`), and must not re-run `-e`.
 */
export function workerExecArgv(argv: string[] = process.execArgv): string[] {
  const out: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    if (a.startsWith("--input-type")) continue;
    if (a === "-e" || a === "--eval" || a === "-p" || a === "--print") {
      i++; // and its script
      continue;
    }
    if (a.startsWith("--eval=") || a.startsWith("--print=")) continue;
    out.push(a);
  }
  return out;
}

/** A log line from the worker, logged again through the service's logger (level and fields kept). */
function relayLog(log: Logger, line: string): void {
  try {
    const { level, msg, time: _t, pid: _p, hostname: _h, ...fields } = JSON.parse(line) as Record<string, unknown>;
    const name = (log.levels.labels[Number(level)] ?? "info") as Level;
    log[name]({ ...fields, thread: "sandbox-executor" }, String(msg ?? ""));
  } catch {
    log.info({ thread: "sandbox-executor" }, line.trim());
  }
}
