// `rollstream train <config>`: the embedded default. Finds NATS (flag, NATS_URL or config) or starts
// a local nats-server with its store under runs/<run>/nats, launches every actor as a child process,
// shows progress and the evaluator's held-out results as they come, and stops what it started.
// Run it again to resume: the learner restores its last checkpoint and the orchestrator its position.
import { copyFileSync, mkdirSync, rmSync, writeFileSync } from "node:fs";
import { join, resolve, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import type { Command } from "commander";
import type { RunConfig } from "../../actors/runtime/config.js";
import { checkConfigFile } from "../../actors/runtime/config-check.js";
import { connectNats, natsReachable } from "../../actors/runtime/nats-connect.js";
import { startNatsServer, type LocalNatsServer } from "../../deploy/local/nats-server.js";
import { ActorLauncher, type ActorSpec } from "../../deploy/local/launcher.js";
import {
  deleteTopology,
  ensureTopology,
  formatIdleRatios,
  readIdleRatios,
  RunState,
  StateKeys,
  withDeadline,
  type HeldOutResult,
} from "../../streams/index.js";
import { healthAlerts } from "../health/verdicts.js";
import { loadRunEnvironments, type LoadedEnvironment } from "../../actors/runtime/environments.js";
import { evalSchedule } from "../../rl/eval-schedule.js";
import { RunProgress } from "../train/progress.js";
import { LIVE_URL_FILE } from "../run-nats.js";
import { OutageReport } from "../train/outage.js";

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

export async function train(configPath: string, opts: TrainOptions): Promise<number> {
  // The same one-pass check as `config check`: nothing starts on a config with any problem.
  const checked = await checkConfigFile(configPath);
  if (!checked.config) {
    process.stderr.write(`invalid config ${configPath}:\n${checked.problems.map((p) => `  - ${p}`).join("\n")}\n`);
    return 2;
  }
  const config: RunConfig = checked.config;
  // Loaded here so a bad environment spec fails before anything starts, and for actorPlan's needsSandbox.
  let envs: Map<string, LoadedEnvironment>;
  try {
    envs = await loadRunEnvironments(config);
  } catch (e) {
    process.stderr.write(`${(e as Error).message}\n`);
    return 2;
  }
  const runDir = resolve(config.outDir, config.run);
  if (opts.fresh) {
    for (const p of ["checkpoints", "metrics.jsonl", "steps.jsonl", "logs", "eval.json"]) rmSync(join(runDir, p), { recursive: true, force: true });
  }
  mkdirSync(join(runDir, "logs"), { recursive: true });
  copyFileSync(configPath, join(runDir, "config.yaml"));

  let server: LocalNatsServer | null = null;
  let url = opts.nats ?? process.env.NATS_URL ?? config.nats.url;
  if (url) {
    if (!(await natsReachable(url))) {
      process.stderr.write(`NATS at ${url} is not reachable\n`);
      return 3;
    }
  } else {
    // A session of its own, as the actors have (launcher.ts): its CPU share, and a terminal's Ctrl-C reaches
    // `train` alone, which stops the server after its actors have drained through it.
    server = await startNatsServer({ storeDir: join(runDir, "nats"), logFile: join(runDir, "logs", "nats-server.log"), ownSession: true });
    url = server.url;
    // `doctor`, `inspect` and `replay` look here first, so they read this live server, not a copy of its store.
    writeFileSync(join(runDir, LIVE_URL_FILE), `${url}\n`);
    process.stdout.write(`started nats-server at ${url} (store ${join(runDir, "nats")}, monitoring http://127.0.0.1:${server.monitorPort}/jsz)\n`);
  }
  const nc = await connectNats(url, "rollstream-train");
  if (opts.fresh) await deleteTopology(nc, config.run);
  const topology = await ensureTopology(nc, config.run, {
    replicas: config.nats.replicas,
    rolloutsMaxBytes: config.nats.rolloutsMaxBytes,
    taskAckWaitMs: config.nats.taskAckWaitMs,
  });
  const state = new RunState(topology.kv);
  const schedule = evalSchedule(config);

  let stopping = false;
  let idleLines: string[] = [];
  let dashboard: { url: string; close(): Promise<void> } | null = null;
  const cleanup = async (launcher?: ActorLauncher, progress?: RunProgress) => {
    stopping = true;
    progress?.stop();
    await withDeadline(dashboard?.close() ?? Promise.resolve(), 5_000, "closing the dashboard").catch(() => undefined);
    await launcher?.stopAll();
    // Every actor left its accounting in the health bucket when it exited: how long each side waited.
    if (launcher) idleLines = formatIdleRatios(await withDeadline(readIdleRatios(nc, config.run), 5_000, "reading idle ratios").catch(() => []));
    await nc.drain().catch(() => undefined);
    await server?.stop();
    if (server) rmSync(join(runDir, LIVE_URL_FILE), { force: true });
  };

  if ((await state.get(StateKeys.runStatus)) === "done") {
    process.stdout.write(`run ${config.run} already finished (use --fresh to start over)\n`);
    printSummary(config, (await state.get(StateKeys.evalResults)) ?? {});
    await cleanup();
    return 0;
  }

  const progress = new RunProgress(
    nc,
    topology.jsm,
    topology.names,
    { metrics: join(runDir, "metrics.jsonl"), steps: join(runDir, "steps.jsonl") },
    config.rl.steps,
  );
  const outage = new OutageReport((line) => progress.say(line));
  // The connection says when the server went and came back: a short outage can fall between two polls
  // of the loop below (its requests wait out a reconnect), and would go unreported.
  void (async () => {
    for await (const s of nc.status()) {
      if (s.type === "disconnect") outage.down(new Error(`disconnected from ${s.server}`));
      else if (s.type === "reconnect") outage.up();
    }
  })().catch(() => undefined);
  // The server we started is part of the run: if it dies, bring it back on the same port and store.
  const superviseServer = (srv: LocalNatsServer) => {
    srv.process.once("exit", (code, signal) => {
      if (stopping) return;
      progress.say(`nats-server exited (code ${code}, signal ${signal}): restarting it on the same store`);
      const again = async (attempt: number): Promise<void> => {
        try {
          server = await startNatsServer({
            storeDir: srv.storeDir,
            port: srv.port,
            monitorPort: srv.monitorPort,
            logFile: join(runDir, "logs", "nats-server.log"),
            ownSession: true,
          });
          superviseServer(server);
        } catch (e) {
          if (stopping) return;
          progress.say(`nats-server restart ${attempt} failed: ${(e as Error).message.split("\n")[0]}`);
          await new Promise((r) => setTimeout(r, Math.min(10_000, 500 * 2 ** attempt)));
          return again(attempt + 1);
        }
      };
      void again(1);
    });
  };
  if (server) superviseServer(server);
  let fatal: string | null = null;
  const launcher = new ActorLauncher({
    binPath,
    configPath: resolve(configPath),
    natsUrl: url,
    logDir: join(runDir, "logs"),
    metricsPortBase: Number(opts.metricsPort ?? config.actors.metricsPort),
    onExit: (spec, code, signal, willRestart) => {
      if ((code === 0 && !signal) || stopping) return;
      progress.say(
        `actor ${spec.name}-${spec.replica} exited (code ${code}, signal ${signal})${willRestart ? "; restarting" : ""} — see ${join(runDir, "logs", `${spec.name}-${spec.replica}.log`)}`,
      );
      if (!willRestart && code !== 130) fatal = `${spec.name} failed`;
    },
  });
  let interrupted = false;
  const onSigint = () => {
    if (interrupted) process.exit(130);
    interrupted = true;
    progress.say("stopping: draining actors (Ctrl-C again to force)");
  };
  process.on("SIGINT", onSigint);
  process.on("SIGTERM", onSigint);

  for (const spec of actorPlan(config, envs, { eval: opts.eval })) launcher.start(spec);
  if (opts.dashboard !== false) dashboard = await serveDashboard(nc, config, Number(opts.dashboardPort ?? 8765));
  if (dashboard) process.stdout.write(`dashboard: ${dashboard.url}\n`);
  progress.start();
  process.stdout.write(`run ${config.run}: actors started, logs in ${join(runDir, "logs")}\n`);

  // The evaluator's results, said as they arrive and kept in runs/<run>/eval.json.
  const shown = new Set<string>();
  const showEvals = async (): Promise<Record<string, HeldOutResult>> => {
    const results = (await state.get(StateKeys.evalResults)) ?? {};
    let fresh = false;
    for (const [v, r] of Object.entries(results).sort(([a], [b]) => Number(a) - Number(b))) {
      if (shown.has(v)) continue;
      shown.add(v);
      fresh = true;
      progress.say(
        r.skipped
          ? `held-out evaluation of v${v} skipped: ${r.skipped}`
          : `held-out pass@1 at v${v}: ${r.passAt1.toFixed(3)} on ${r.n} problems${passAtKText(r)}${splitsText(r)} (${r.seconds.toFixed(1)} s)`,
      );
    }
    if (fresh) writeFileSync(join(runDir, "eval.json"), JSON.stringify(results, null, 2) + "\n");
    return results;
  };
  // Silent or stuck actors, named as soon as doctor would name them; said once per actor and verdict.
  const alerted = new Map<string, string>();
  let lastHealthCheck = 0;
  const checkHealth = async () => {
    if (Date.now() - lastHealthCheck < 3_000) return;
    lastHealthCheck = Date.now();
    const alerts = await withDeadline(healthAlerts(nc, config.run), 5_000, "reading heartbeats").catch(() => []);
    const now = new Set<string>();
    for (const line of alerts) {
      const [who, verdict] = line.split(" ", 2);
      const key = `${who}`;
      now.add(key);
      if (alerted.get(key) !== verdict) progress.say(`health: ${line}`);
      alerted.set(key, verdict ?? "");
    }
    for (const key of [...alerted.keys()])
      if (!now.has(key)) {
        alerted.delete(key);
        progress.say(`health: ${key} is healthy again`);
      }
  };
  try {
    while (!interrupted && !fatal) {
      let version: number, step: number;
      try {
        version = await state.policyVersion();
        step = await state.learnerStep();
        if (opts.eval !== false) await showEvals();
        await checkHealth();
        outage.up();
      } catch (e) {
        // The server is away (restarting, or being restarted by us): wait for it, never give up the run.
        outage.down(e);
        await new Promise((r) => setTimeout(r, 1000));
        continue;
      }
      if (step >= config.rl.steps && version >= config.rl.steps) break;
      await new Promise((r) => setTimeout(r, 1000));
    }
    if (fatal) {
      progress.say(`run stopped: ${fatal}`);
      await cleanup(launcher, progress);
      return 1;
    }
    if (interrupted) {
      await cleanup(launcher, progress);
      process.stdout.write(`run ${config.run} stopped; run the same command to resume from the last checkpoint\n`);
      return 130;
    }
    progress.say(`RL finished: ${config.rl.steps} steps`);
    // The evaluator exits once the final version is evaluated; wait for its results while it works.
    let results: Record<string, HeldOutResult> = {};
    if (opts.eval !== false) {
      const evalDeadline = Date.now() + 10 * 60_000;
      while (!interrupted && !fatal && Date.now() < evalDeadline) {
        results = await showEvals().catch(() => results);
        if (schedule.every((v) => results[String(v)] !== undefined)) break;
        await new Promise((r) => setTimeout(r, 500));
      }
    }
    // Let the orchestrator mark the run done and the checkpoint actor write the final state.
    const deadline = Date.now() + 30_000;
    while (Date.now() < deadline && (await state.get(StateKeys.runStatus).catch(() => undefined)) !== "done") await new Promise((r) => setTimeout(r, 250));
    while (Date.now() < deadline && ((await state.get(StateKeys.checkpointLatest).catch(() => undefined)) ?? -1) < config.rl.steps)
      await new Promise((r) => setTimeout(r, 250));
    if (outage.outages.length)
      progress.say(`rode through ${outage.outages.length} NATS outage(s): ${outage.outages.map((x) => `${x.toFixed(1)} s`).join(", ")}`);
    await cleanup(launcher, progress);
    printSummary(config, results);
    if (idleLines.length)
      process.stdout.write(["time spent waiting, per actor (size the inference : training split by it):", ...idleLines.map((l) => `  ${l}`)].join("\n") + "\n");
    return 0;
  } catch (e) {
    progress.say(`train failed: ${(e as Error).message}`);
    await cleanup(launcher, progress);
    return 1;
  } finally {
    process.off("SIGINT", onSigint);
    process.off("SIGTERM", onSigint);
  }
}

/** Held-out splits other than eval (arithmetic's hard), said beside the eval split's figure. */
function splitsText(r: HeldOutResult): string {
  return Object.entries(r.splits ?? {})
    .map(([name, s]) => `; ${name} split ${s.passAt1.toFixed(3)} on ${s.n}`)
    .join("");
}

function passAtKText(r: HeldOutResult): string {
  const ks = Object.entries(r.passAtK);
  return ks.length ? `, sampled ${ks.map(([k, v]) => `${k} ${v.toFixed(3)}`).join(" ")}` : "";
}

/** The eval curve (greedy pass@1 per evaluated version), then before and after RL. */
function printSummary(config: RunConfig, results: Record<string, HeldOutResult>): void {
  const versions = Object.keys(results)
    .map(Number)
    .sort((a, b) => a - b);
  const lines = ["held-out evaluation (greedy pass@1 by policy version):"];
  if (versions.length > 2) lines.push(`  curve     ${versions.map((v) => `v${v} ${results[String(v)]!.passAt1.toFixed(3)}`).join("  ")}`);
  const line = (label: string, r?: HeldOutResult) =>
    r && !r.skipped
      ? `  ${label.padEnd(10)} pass@1 ${r.passAt1.toFixed(3)}  reward ${r.rewardMean.toFixed(3)}${passAtKText(r)}${splitsText(r)}  (n=${r.n}, policy v${r.version})`
      : `  ${label.padEnd(10)} (not evaluated)`;
  const first = results["0"];
  const last = results[String(config.rl.steps)];
  lines.push(line(config.sft ? "after SFT" : "at start", first), line("after RL", last));
  if (first && last && !first.skipped && !last.skipped) {
    const d = last.passAt1 - first.passAt1;
    lines.push(`  RL changed pass@1 by ${d >= 0 ? "+" : ""}${d.toFixed(3)}`);
  }
  process.stdout.write(lines.join("\n") + "\n");
}

/** The run's dashboard on `port`, or on any free port when that one is taken; null (said) when it cannot start. */
async function serveDashboard(nc: import("@nats-io/transport-node").NatsConnection, config: RunConfig, port: number) {
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
