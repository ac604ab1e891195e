// `rollstream train <config>`: the embedded default. Finds NATS (flag, NATS_URL or config) or starts
// a local nats-server with its store under runs/<run>/nats, launches every actor as a child process,
// shows progress, evaluates held-out pass@1 after SFT and after RL, and stops what it started.
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
import { deleteTopology, ensureTopology, RunChannels, RunState, StateKeys, type HeldOutResult } from "../../streams/index.js";
import { loadRunEnvironments, type LoadedEnvironment } from "../../actors/runtime/environments.js";

// The model code loads only when an evaluation runs, so `rollstream train --help` works without kernels.
const heldOutEval: typeof import("../held-out-eval.js").heldOutEval = async (...a) => (await import("../held-out-eval.js")).heldOutEval(...a);
import { RunProgress } from "../train/progress.js";
import { OutageReport } from "../train/outage.js";

export interface TrainOptions {
  nats?: string;
  fresh?: boolean;
  eval?: boolean;
  metricsPort?: string;
}

// Children run the same compiled CLI as this process (dist/ or a dist-* build).
const binPath = resolve(dirname(fileURLToPath(import.meta.url)), "..", "main.js");

export function actorPlan(config: RunConfig, envs: ReadonlyMap<string, LoadedEnvironment>): ActorSpec[] {
  const specs: ActorSpec[] = [
    { name: "checkpoint", replica: 0 },
    { name: "learner", replica: 0 },
    { name: "orchestrator", replica: 0 },
  ];
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
    .option("--no-eval", "skip the held-out pass@1 evaluations")
    .option("--metrics-port <port>", "first Prometheus port for the actors (0 = off)")
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
    for (const p of ["checkpoints", "metrics.jsonl", "logs", "eval.json"]) rmSync(join(runDir, p), { recursive: true, force: true });
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
    server = await startNatsServer({ storeDir: join(runDir, "nats"), logFile: join(runDir, "logs", "nats-server.log") });
    url = server.url;
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
  const channels = new RunChannels(topology.wire);
  const evals: { sft?: HeldOutResult; rl?: HeldOutResult } = (await state.get(StateKeys.evalSummary)) ?? {};

  let stopping = false;
  const cleanup = async (launcher?: ActorLauncher, progress?: RunProgress) => {
    stopping = true;
    progress?.stop();
    await launcher?.stopAll();
    await nc.drain().catch(() => undefined);
    await server?.stop();
  };

  if ((await state.get(StateKeys.runStatus)) === "done") {
    process.stdout.write(`run ${config.run} already finished (use --fresh to start over)\n`);
    printSummary(evals);
    await cleanup();
    return 0;
  }

  const progress = new RunProgress(nc, topology.jsm, topology.names, join(runDir, "metrics.jsonl"), config.rl.steps);
  const outage = new OutageReport((line) => progress.say(line));
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

  for (const spec of actorPlan(config, envs)) launcher.start(spec);
  progress.start();
  process.stdout.write(`run ${config.run}: actors started, logs in ${join(runDir, "logs")}\n`);

  const saveEvals = async () => {
    await state.put(StateKeys.evalSummary, evals);
    writeFileSync(join(runDir, "eval.json"), JSON.stringify(evals, null, 2) + "\n");
  };
  let sftEval: Promise<void> | null = null;
  try {
    while (!interrupted && !fatal) {
      let version: number, step: number, phase: string | undefined;
      try {
        version = await state.policyVersion();
        step = await state.learnerStep();
        phase = await state.get(StateKeys.runPhase);
        outage.up();
      } catch (e) {
        // The server is away (restarting, or being restarted by us): wait for it, never give up the run.
        outage.down(e);
        await new Promise((r) => setTimeout(r, 1000));
        continue;
      }
      if (opts.eval !== false && !evals.sft && version >= 0 && sftEval === null && phase === "rl") {
        sftEval = (async () => {
          const r = await heldOutEval(config, await channels.weights.fetch(0), 0, { threads: 1 });
          evals.sft = r;
          await saveEvals();
          progress.say(`held-out pass@1 after ${config.sft ? "SFT" : "init"} (v0): ${r.passAt1.toFixed(3)} on ${r.n} problems (${r.seconds.toFixed(1)} s)`);
        })().catch((e) => progress.say(`eval after SFT failed: ${(e as Error).message}`));
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
    await sftEval;
    progress.say(`RL finished: ${config.rl.steps} steps`);
    if (opts.eval !== false) {
      const r = await heldOutEval(config, await channels.weights.fetch(config.rl.steps), config.rl.steps, { threads: config.model.threads });
      evals.rl = r;
      await saveEvals();
    }
    // Let the orchestrator mark the run done and the checkpoint actor write the final state.
    const deadline = Date.now() + 30_000;
    while (Date.now() < deadline && (await state.get(StateKeys.runStatus).catch(() => undefined)) !== "done") await new Promise((r) => setTimeout(r, 250));
    while (Date.now() < deadline && ((await state.get(StateKeys.checkpointLatest).catch(() => undefined)) ?? -1) < config.rl.steps)
      await new Promise((r) => setTimeout(r, 250));
    if (outage.outages.length)
      progress.say(`rode through ${outage.outages.length} NATS outage(s): ${outage.outages.map((x) => `${x.toFixed(1)} s`).join(", ")}`);
    await cleanup(launcher, progress);
    printSummary(evals);
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

function printSummary(evals: { sft?: HeldOutResult; rl?: HeldOutResult }): void {
  const line = (label: string, r?: HeldOutResult) =>
    r
      ? `  ${label.padEnd(10)} pass@1 ${r.passAt1.toFixed(3)}  reward ${r.rewardMean.toFixed(3)}  (n=${r.n}, policy v${r.version})`
      : `  ${label.padEnd(10)} (not evaluated)`;
  process.stdout.write(["held-out evaluation:", line("after SFT", evals.sft), line("after RL", evals.rl)].join("\n") + "\n");
  if (evals.sft && evals.rl) {
    const d = evals.rl.passAt1 - evals.sft.passAt1;
    process.stdout.write(`  RL changed pass@1 by ${d >= 0 ? "+" : ""}${d.toFixed(3)}\n`);
  }
}
