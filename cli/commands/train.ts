// `rollstream train <config>`: the embedded default. Finds NATS (flag, NATS_URL or config) or starts
// a local nats-server with its store under runs/<run>/nats, launches every actor as a child process,
// shows progress and the evaluator's held-out results as they come, and stops what it started.
// Run it again to resume: the learner restores its last checkpoint and the orchestrator its position.
// train() is the plan of named steps; the actors and dashboard steps are here, the others under cli/train/:
// prepare.ts (config), server.ts, session.ts (what the steps share, and cleanup), owner.ts (the run's lease: a
// second train of a running run is refused), follow.ts (progress), summary.ts.
import { join, resolve, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import type { Command } from "commander";
import type { NatsConnection } from "@nats-io/transport-node";
import { ExitCodes } from "../../actors/runtime/actor.js";
import type { RunConfig } from "../../actors/runtime/config.js";
import { ActorLauncher, type ActorSpec } from "../../deploy/local/launcher.js";
import { StateKeys } from "../../streams/index.js";
import type { LoadedEnvironment } from "../../actors/runtime/environments.js";
import { EvalFeed } from "../train/evals.js";
import { waitForRl, watchOutages } from "../train/follow.js";
import { prepareRun } from "../train/prepare.js";
import { claimRun } from "../train/owner.js";
import { RunStateRepair } from "../train/run-state.js";
import { findOrStartServer, superviseServer } from "../train/server.js";
import { watchStoreDisk } from "../train/store-watch.js";
import { TrainSession } from "../train/session.js";
import { endRun, reportFinishedRun } from "../train/summary.js";

export interface TrainOptions {
  nats?: string;
  fresh?: boolean;
  eval?: boolean;
  dashboard?: boolean;
  dashboardPort?: string;
  metricsPort?: string;
}

// Children run the same compiled CLI as this process (dist/ or a dist-* build).
const binPath = resolve(dirname(fileURLToPath(import.meta.url)), "..", "main.js");

export function actorPlan(config: RunConfig, envs: ReadonlyMap<string, LoadedEnvironment>, o: { eval?: boolean } = {}): ActorSpec[] {
  const specs: ActorSpec[] = [
    { name: "checkpoint", replica: 0 },
    { name: "learner", replica: 0 },
    { name: "orchestrator", replica: 0 },
  ];
  if (o.eval !== false) specs.push({ name: "evaluator", replica: 0 });
  for (let i = 0; i < config.actors.reward.replicas; i++) specs.push({ name: "reward", replica: i });
  for (let i = 0; i < config.actors.inference.replicas; i++) specs.push({ name: "inference", replica: i });
  // The environments declare it (Environment.needsSandbox); `sandbox.enabled: true` forces it on.
  const needsSandbox = [...envs.values()].some((e) => e.env.needsSandbox === true) || config.sandbox.enabled === true;
  if (needsSandbox) specs.push({ name: "sandbox", replica: 0 });
  return specs;
}

export function registerTrainCommand(program: Command): void {
  program
    .command("train <config>")
    .description("run SFT (if configured) then RL, every actor as a child process; resumes a stopped run")
    .option("--nats <url>", "use this NATS server instead of NATS_URL / the config / a local one")
    .option("--fresh", "delete the run's streams, checkpoints and metrics first")
    .option("--no-eval", "run without the evaluator (no held-out evaluations)")
    .option("--metrics-port <port>", "first Prometheus port for the actors (0 = off)")
    .option("--no-dashboard", "do not serve the run's dashboard")
    .option("--dashboard-port <port>", "dashboard port (taken: any free one)", "8765")
    .action(async (configPath: string, opts: TrainOptions) => {
      process.exitCode = await train(configPath, opts);
    });
}

/**
 * The plan: config, server, owner, actors, progress, dashboard, summary. Exit codes: 0 done (or already done), 1
 * an actor failed for good or train itself did, 2 a bad config or environment, 3 NATS unreachable, 4 another
 * train owns the run, 130 Ctrl-C.
 */
export async function train(configPath: string, opts: TrainOptions): Promise<number> {
  const run = await prepareRun(configPath);
  if (typeof run === "number") return run;
  const found = await findOrStartServer(run, opts.nats);
  if (typeof found === "number") return found;
  const owned = await claimRun(run, found, opts.fresh === true);
  if (typeof owned === "number") return owned;
  const session = await TrainSession.open(run, found, owned);
  // A damaged key (written by hand, say) is rebuilt from the run's records before anything reads it.
  const runState = new RunStateRepair(session);
  if (!(await runState.atStart())) return session.cleanup().then(() => 1);
  if ((await session.state.get(StateKeys.runStatus)) === "done") return reportFinishedRun(session);

  const outage = watchOutages(session);
  // The server we started is part of the run: if it dies, bring it back on the same port and store.
  // and when its store's disk fills, say so, and restart it once there is room if JetStream stopped for good.
  if (session.server) {
    superviseServer(session, session.server, run.runDir);
    void watchStoreDisk(session);
  }
  session.launcher = actorLauncher(session, opts.metricsPort);
  const releaseSignals = drainOnSignals(session);
  for (const spec of actorPlan(run.config, run.envs, { eval: opts.eval })) session.launcher.start(spec);
  if (opts.dashboard !== false) session.dashboard = await serveDashboard(session.nc, run.config, Number(opts.dashboardPort ?? 8765));
  if (session.dashboard) process.stdout.write(`dashboard: ${session.dashboard.url}\n`);
  session.progress.start();
  process.stdout.write(`run ${run.config.run}: actors started, logs in ${join(run.runDir, "logs")}\n`);

  const evals = opts.eval !== false ? new EvalFeed(session.state, run.runDir, (line) => session.say(line), session.disk, runState) : null;
  try {
    await waitForRl(session, outage, evals, runState);
    return await endRun(session, outage, evals);
  } catch (e) {
    session.say(`train failed: ${(e as Error).message}`);
    await session.cleanup();
    return 1;
  } finally {
    releaseSignals();
  }
}

/** The run's actors as child processes. One that exits unexpectedly is said, with its log; one that will not be
 *  restarted fails the run, unless it stopped on an interrupt of its own (130). Exits while stopping are expected. */
function actorLauncher(s: TrainSession, metricsPort?: string): ActorLauncher {
  const logDir = join(s.run.runDir, "logs");
  return new ActorLauncher({
    binPath,
    configPath: resolve(s.run.configPath),
    natsUrl: s.url,
    logDir,
    metricsPortBase: Number(metricsPort ?? s.config.actors.metricsPort),
    diskFull: s.disk,
    onExit: (spec, code, signal, willRestart) => {
      if ((code === 0 && !signal) || s.stopping) return;
      // Code 4: it could not renew its lease in time (a NATS outage longer than the lease), or another took it.
      const why = code === ExitCodes.lease ? "lost its lease" : `code ${code}, signal ${signal}`;
      s.say(`actor ${spec.name}-${spec.replica} exited (${why})${willRestart ? "; restarting" : ""} — see ${join(logDir, `${spec.name}-${spec.replica}.log`)}`);
      if (!willRestart && code !== 130) s.fatal = `${spec.name} failed`;
    },
  });
}

/** Ctrl-C or SIGTERM once: the watch sees `interrupted` and the actors drain; twice: exit now. Returns the undo. */
function drainOnSignals(s: TrainSession): () => void {
  const onSignal = () => {
    if (s.interrupted) process.exit(130);
    s.interrupted = true;
    s.say("stopping: draining actors (Ctrl-C again to force)");
  };
  process.on("SIGINT", onSignal);
  process.on("SIGTERM", onSignal);
  return () => {
    process.off("SIGINT", onSignal);
    process.off("SIGTERM", onSignal);
  };
}

/** The run's dashboard on `port`, or on any free port when that one is taken; null (said) when it cannot start. */
async function serveDashboard(nc: NatsConnection, config: RunConfig, port: number) {
  // Loaded here so `train --no-dashboard` never loads the web server.
  const { startDashboard } = await import("../dashboard/server.js");
  for (const p of [port, 0]) {
    try {
      return await startDashboard({ nc, run: config.run, port: p, config });
    } catch (e) {
      if (p === 0) process.stderr.write(`dashboard not started: ${(e as Error).message.split("\n")[0]}\n`);
    }
  }
  return null;
}
