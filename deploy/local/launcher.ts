// Launches every actor of a run as its own child process (`rollstream actor <name>`), sends their
// logs to runs/<run>/logs/<actor>.log, restarts one that dies unexpectedly, and drains them all on stop.
import { killWithParent } from "./child-reaper.js";
import { spawn, type ChildProcess } from "node:child_process";
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { AppendLog, type DiskFullWatcher } from "./append-log.js";

export interface ActorSpec {
  name: string;
  /** Replica index, part of the instance name and the log file name. */
  replica: number;
  env?: Record<string, string>;
}

interface Running {
  spec: ActorSpec;
  child: ChildProcess;
  restarts: number;
  log: AppendLog;
}

export interface LauncherOptions {
  binPath: string;
  configPath: string;
  natsUrl: string;
  logDir: string;
  maxRestarts?: number;
  metricsPortBase?: number;
  onExit?: (spec: ActorSpec, code: number | null, signal: string | null, willRestart: boolean) => void;
  /** Told when the log folder's disk is full and when it has room again (the actors' output waits in memory). */
  diskFull?: DiskFullWatcher;
}

const QUIET: DiskFullWatcher = { full: () => undefined, back: () => undefined };

/** A restart after this long up is not part of a crash loop. */
const RESTART_WINDOW_MS = 60_000;

export class ActorLauncher {
  private running = new Map<string, Running>();
  private stopping = false;
  private portCounter = 0;

  constructor(private readonly o: LauncherOptions) {
    mkdirSync(o.logDir, { recursive: true });
  }

  static instanceName(spec: ActorSpec): string {
    return `${spec.name}-${spec.replica}`;
  }

  start(spec: ActorSpec, restarts = 0): void {
    const id = ActorLauncher.instanceName(spec);
    const args = [this.o.binPath, "actor", spec.name, "--config", this.o.configPath, "--nats", this.o.natsUrl, "--instance", id];
    if (this.o.metricsPortBase && this.o.metricsPortBase > 0) args.push("--metrics-port", String(this.o.metricsPortBase + this.portCounter++));
    const log = this.running.get(id)?.log ?? new AppendLog(join(this.o.logDir, `${id}.log`), this.o.diskFull ?? QUIET);
    // Each actor a session of its own (detached: setsid), as each is its own service in a deployment. Where the
    // kernel shares the CPU between sessions first (autogroups: a host whose processes all sit in the root
    // cgroup), the learner, inference and the sandbox service would otherwise split one share between them
    // against every sandbox's and every execution's own (sandbox/README.md). A terminal's Ctrl-C then
    // reaches `train` alone, which drains them (stopAll); they still end with it (killWithParent).
    const child = killWithParent(spawn(process.execPath, args, { stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, ...spec.env }, detached: true }));
    // Read whatever the disk does: an actor blocked on a full pipe would stop working.
    child.stdout!.on("data", (d: Buffer) => log.write(d));
    child.stderr!.on("data", (d: Buffer) => log.write(d));
    const entry: Running = { spec, child, restarts, log };
    this.running.set(id, entry);
    const startedAt = Date.now();
    child.once("exit", (code, signal) => {
      const unexpected = !this.stopping && code !== 0;
      // An actor that ran a while before it died (a server outage an hour into the run) starts a fresh
      // count: maxRestarts bounds crash loops, not the number of incidents in a long run.
      const count = Date.now() - startedAt > RESTART_WINDOW_MS ? 0 : restarts;
      const willRestart = unexpected && count < (this.o.maxRestarts ?? 3);
      this.o.onExit?.(spec, code, signal, willRestart);
      if (willRestart)
        setTimeout(() => {
          if (!this.stopping) this.start(spec, count + 1);
        }, 1000);
    });
  }

  pid(name: string, replica = 0): number | undefined {
    return this.running.get(`${name}-${replica}`)?.child.pid;
  }

  /** SIGTERM to every actor (they drain), SIGKILL to any still alive after `graceMs`. */
  async stopAll(graceMs = 15_000): Promise<void> {
    this.stopping = true;
    const waits = [...this.running.values()].map(
      ({ child }) =>
        new Promise<void>((resolve) => {
          if (child.exitCode !== null || child.signalCode !== null) return resolve();
          child.once("exit", () => resolve());
          child.kill("SIGTERM");
          setTimeout(() => {
            child.kill("SIGKILL");
          }, graceMs).unref();
        }),
    );
    await Promise.all(waits);
    for (const r of this.running.values()) r.log.close();
  }

  /** Waits for one actor (all replicas) to exit on its own. */
  async waitExit(name: string): Promise<void> {
    const waits = [...this.running.values()]
      .filter((r) => r.spec.name === name)
      .map((r) => new Promise<void>((resolve) => (r.child.exitCode !== null ? resolve() : r.child.once("exit", () => resolve()))));
    await Promise.all(waits);
  }
}
