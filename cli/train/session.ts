// One `train` invocation's shared state, which every step reads: the connection, the run's train lease
// (owner.ts) and the run's state, the server train started (the newest one, once the supervisor restarted it),
// the launcher, the dashboard and the progress view, and three flags — stopping (cleanup has begun: actor exits
// and the server's death are expected then), interrupted (Ctrl-C or SIGTERM) and fatal (an actor failed for
// good, or another train took the run over). cleanup() is the one way out of a started run: it stops what
// train started, each thing before what it stands on, and gives the lease back.
import { rmSync } from "node:fs";
import { join } from "node:path";
import type { NatsConnection } from "@nats-io/transport-node";
import type { ActorLauncher } from "../../deploy/local/launcher.js";
import type { LocalNatsServer } from "../../deploy/local/nats-server.js";
import { ensureTopology, formatIdleRatios, readIdleRatios, RunState, withDeadline, type HeldLease } from "../../streams/index.js";
import { LIVE_URL_FILE } from "../run-nats.js";
import type { OwnedRun } from "./owner.js";
import type { PreparedRun } from "./prepare.js";
import { RunProgress } from "./progress.js";
import { DiskReport } from "./disk-report.js";
import type { FoundServer, ServerHolder } from "./server.js";

export class TrainSession implements ServerHolder {
  stopping = false;
  interrupted = false;
  fatal: string | null = null;
  launcher: ActorLauncher | null = null;
  dashboard: { url: string; close(): Promise<void> } | null = null;
  /** How long each actor waited, per side: read by cleanup() once the actors have stopped. */
  idleLines: string[] = [];

  private constructor(
    readonly run: PreparedRun,
    readonly url: string,
    public server: LocalNatsServer | null,
    readonly nc: NatsConnection,
    /** The run's train lease (owner.ts), renewed while train runs and given back by cleanup(). */
    readonly lease: HeldLease,
    readonly state: RunState,
    /** Not started until the actors are: a finished run's summary is printed without it. */
    readonly progress: RunProgress,
    /** Says when the run folder's disk is full and when it has room again. */
    readonly disk: DiskReport,
  ) {}

  /** Makes sure the streams and buckets of the run train owns exist, and keeps its lease: lost to another train, the run stops. */
  static async open(run: PreparedRun, found: FoundServer, owned: OwnedRun): Promise<TrainSession> {
    const { config, runDir } = run;
    const { nc, lease } = owned;
    const topology = await ensureTopology(nc, config.run, {
      replicas: config.nats.replicas,
      rolloutsMaxBytes: config.nats.rolloutsMaxBytes,
      eventsMaxBytes: config.nats.eventsMaxBytes,
      taskAckWaitMs: config.nats.taskAckWaitMs,
    });
    const files = { metrics: join(runDir, "metrics.jsonl"), steps: join(runDir, "steps.jsonl") };
    const disk = new DiskReport(runDir, (line) => progress.say(line));
    const progress = new RunProgress(nc, topology.jsm, topology.names, files, config.rl.steps, disk);
    const s = new TrainSession(run, found.url, found.server, nc, lease, new RunState(topology.kv), progress, disk);
    lease.keep((why) => (s.fatal ??= `another train owns the run now: ${why}`), { fence: false });
    return s;
  }

  get config() {
    return this.run.config;
  }

  say(line: string): void {
    this.progress.say(line);
  }

  /** Stops the dashboard, drains the actors, then the connection, then the server train started. */
  async cleanup(): Promise<void> {
    this.stopping = true;
    this.progress.stop();
    await withDeadline(this.dashboard?.close() ?? Promise.resolve(), 5_000, "closing the dashboard").catch(() => undefined);
    await this.launcher?.stopAll();
    // Every actor left its accounting in the health bucket when it exited: how long each side waited.
    if (this.launcher)
      this.idleLines = formatIdleRatios(await withDeadline(readIdleRatios(this.nc, this.config.run), 5_000, "reading idle ratios").catch(() => []));
    // After its actors: a train started now finds the run free only once they have let go of it.
    await withDeadline(this.lease.release(), 5_000, "giving back the run's lease").catch(() => undefined);
    await this.nc.drain().catch(() => undefined);
    await this.server?.stop();
    if (this.server) rmSync(join(this.run.runDir, LIVE_URL_FILE), { force: true });
  }
}
