// `rollstream doctor --run R`: is the run healthy, and if not, which actor is silent or stuck, on what,
// since when, and what it last logged. Reads the run's health bucket (every actor's heartbeat), its
// durable work consumers (what is pending or unacked, and how old the oldest of it is), and its state KV key by
// key against the run's streams (cli/health/run-state.ts): a damaged key is a problem, and `--repair` rebuilds it
// where the streams and checkpoints say enough. Exit 0 when healthy, 1 when not (or the run cannot be read), 2 on
// a usage error.
import type { Command } from "commander";
import { UsageError } from "../errors.js";
import { Kvm } from "@nats-io/kv";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { connectNats } from "../../actors/runtime/nats-connect.js";
import { loadRunConfig, type RunConfig } from "../../actors/runtime/config.js";
import { closeRunEnvironments, loadRunEnvironments } from "../../actors/runtime/environments.js";
import { natsForRun } from "../run-nats.js";
import { JetStreamApiCodes, JetStreamApiError } from "@nats-io/jetstream";
import {
  consumerBacklogs,
  HealthBoard,
  isInfrastructureError,
  retryInfrastructure,
  openWire,
  RunChannels,
  runNames,
  RunState,
  StateKeys,
  summariseIdle,
  formatIdleRatios,
  type ConsumerBacklog,
  type EngineFigures,
} from "../../streams/index.js";
import { classifyRun, DEFAULT_THRESHOLDS, instanceLabel, type InstanceHealth, type RunHealth } from "../health/verdicts.js";
import { checkRunState, type StateCheck } from "../health/run-state.js";

interface DoctorOptions {
  run?: string;
  config?: string;
  nats?: string;
  outDir?: string;
  staleMs?: string;
  stuckMs?: string;
  json?: boolean;
  repair?: boolean;
}

/** What examine() needs besides the connection. */
interface Examination {
  run: string;
  url: string;
  thresholds: { staleMs: number; stuckMs: number };
  json: boolean;
  repair: boolean;
  /** The run's config (--config, or the copy train keeps in the run folder): rl.steps and environments for the state check. */
  config?: RunConfig;
  runDir: string;
}

export function registerDoctorCommand(program: Command): void {
  program
    .command("doctor")
    .description("check a run's health: names silent or stuck actors, what they wait on, and their last log line")
    .option("--run <run>", "run name")
    .option("-c, --config <file>", "take the run name and NATS URL from a run config")
    .option("--nats <url>", "NATS server (default: NATS_URL, the config's, else the run's stored streams under <out-dir>/<run>/nats)")
    .option("--out-dir <dir>", "where run folders live", "runs")
    .option("--stale-ms <ms>", "an actor with no heartbeat for longer than this is silent", String(DEFAULT_THRESHOLDS.staleMs))
    .option("--stuck-ms <ms>", "an actor working on one item, or waiting on one thing, for longer than this is stuck", String(DEFAULT_THRESHOLDS.stuckMs))
    .option("--json", "print one JSON object")
    .option("--repair", "rebuild damaged run-state keys (KV) from the run's streams and checkpoints; name those that cannot be")
    // A usage error exits 2 like every other bad input to this command (commander would exit 1).
    .exitOverride((err) => process.exit(err.exitCode === 0 ? 0 : 2))
    .action(async (opts: DoctorOptions) => {
      try {
        process.exitCode = await doctor(opts);
      } catch (e) {
        // One clear line, never a stack: this command is what a person runs when something is already wrong.
        const line = (e as Error).message.split("\n")[0];
        process.stderr.write(`doctor: ${line}\n`);
        if (opts.json && !(e instanceof UsageError)) process.stdout.write(`${JSON.stringify({ run: opts.run ?? null, healthy: false, error: line })}\n`);
        process.exitCode = e instanceof UsageError ? 2 : 1;
      }
    });
}

function positiveMs(name: string, value: string | undefined, fallback: number): number {
  if (value === undefined) return fallback;
  const n = Number(value);
  if (!Number.isFinite(n) || n <= 0) throw new UsageError(`${name} must be a positive number of milliseconds, not ${JSON.stringify(value)}`);
  return n;
}

async function doctor(opts: DoctorOptions): Promise<number> {
  const thresholds = {
    staleMs: positiveMs("--stale-ms", opts.staleMs, DEFAULT_THRESHOLDS.staleMs),
    stuckMs: positiveMs("--stuck-ms", opts.stuckMs, DEFAULT_THRESHOLDS.stuckMs),
  };
  let run = opts.run;
  let config: RunConfig | undefined;
  let outDir = opts.outDir ?? "runs";
  if (opts.config) {
    try {
      config = loadRunConfig(opts.config);
    } catch (e) {
      throw new UsageError((e as Error).message);
    }
    run ??= config.run;
    outDir = config.outDir;
  }
  if (!run) throw new UsageError("doctor needs --run or --config");
  try {
    runNames(run);
  } catch (e) {
    throw new UsageError((e as Error).message);
  }
  const runDir = join(outDir, run);
  config ??= keptConfig(runDir);
  const served = await natsForRun(runDir, opts.config ? config?.nats.url : undefined, opts.nats);
  try {
    const nc = await connectNats(served.url, "rollstream-doctor");
    try {
      return await examine(nc, { run, url: served.url, thresholds, json: opts.json === true, repair: opts.repair === true, config, runDir });
    } finally {
      await nc.close();
    }
  } finally {
    await served.stop();
  }
}

// People run doctor when something broke, often just after a server died and the cluster is electing new
// leaders (a few seconds): it waits that out, briefly, instead of reporting the run missing or timing out.
const DOCTOR_RETRY_DELAYS_MS = [250, 500, 1000, 2000, 3000, 4000];
const DOCTOR_PATIENCE_S = Math.round(DOCTOR_RETRY_DELAYS_MS.reduce((a, b) => a + b, 0) / 1000);
const ride = <T>(call: () => Promise<T>): Promise<T> => retryInfrastructure(call, DOCTOR_RETRY_DELAYS_MS);

/** The copy of the run's config train keeps in the run folder, when it is there and sound. */
function keptConfig(runDir: string): RunConfig | undefined {
  const path = join(runDir, "config.yaml");
  if (!existsSync(path)) return undefined;
  try {
    return loadRunConfig(path);
  } catch {
    return undefined;
  }
}

async function examine(nc: Awaited<ReturnType<typeof connectNats>>, o: Examination): Promise<number> {
  const { run, url, thresholds, json } = o;
  const wire = openWire(nc, run);
  const jsm = await ride(() => wire.jsm());
  const stateStream = await ride(() => jsm.streams.info(`KV_${wire.names.kvBucket}`)).catch((e) => {
    if (e instanceof JetStreamApiError && e.code === JetStreamApiCodes.StreamNotFound) return null;
    throw isInfrastructureError(e) ? new Error(`JetStream at ${url} did not answer for ${DOCTOR_PATIENCE_S} s: ${(e as Error).message}`) : e;
  });
  if (!stateStream) throw new Error(`no run ${run} on ${url} (no state bucket ${wire.names.kvBucket})`);
  const state = new RunState(await ride(() => new Kvm(nc).open(wire.names.kvBucket)));
  const board = new HealthBoard(wire.health);
  const hasBucket = await ride(() => board.exists());
  const entries = hasBucket ? await ride(() => board.read()) : [];
  const consumers = await ride(() => consumerBacklogs(wire));
  const now = Date.now();
  const alive = classifyRun(entries, undefined, now, thresholds).instances.filter((i) => i.verdict !== "silent" && i.verdict !== "exited").length;
  const checked = await ride(() => examineState(new RunChannels(wire), state, o, alive));
  const status = await ride(() => state.get(StateKeys.runStatus)).catch(() => undefined);
  const health: RunHealth = classifyRun(entries, status, now, thresholds);
  if (!hasBucket) health.problems.unshift(`run ${run} has no health bucket ${wire.names.healthBucket}: its actors predate heartbeats, or never started`);
  health.problems.push(...checked.problems);
  health.healthy = health.problems.length === 0;
  const idle = summariseIdle(entries.flatMap((e) => (e.heartbeat ? [e.heartbeat] : [])));
  if (json) {
    const out = {
      run,
      url,
      status: status ?? null,
      healthy: health.healthy,
      checkedAt: new Date(now).toISOString(),
      ...thresholds,
      problems: health.problems,
      repaired: checked.repaired,
      instances: health.instances,
      consumers,
      idle,
    };
    process.stdout.write(`${JSON.stringify(out, null, 2)}\n`);
  } else {
    printReport(run, url, status, health, consumers, formatIdleRatios(idle));
    if (checked.repaired.length) process.stdout.write(`repaired run state:\n${checked.repaired.map((l) => `  - ${l}\n`).join("")}`);
  }
  return health.healthy ? 0 : 1;
}

/** The run's state KV against its streams (and, with --repair, put right): rl.steps and environments from its config. */
function examineState(channels: RunChannels, state: RunState, o: Examination, alive: number): Promise<StateCheck> {
  const c = o.config;
  const environments = async () => {
    const loaded = [...(await loadRunEnvironments(c!)).values()];
    await closeRunEnvironments(loaded);
    return loaded.map((e) => ({ key: e.key, id: e.id, weight: e.weight }));
  };
  const config = c && c.run === o.run ? { rlSteps: c.rl.steps, environments } : undefined;
  return checkRunState({ channels, state, config, runDir: o.runDir, alive }, o.repair);
}

const secs = (ms: number | undefined) => (ms === undefined ? "" : `${(ms / 1000).toFixed(1)}s`);

function cut(s: string, n: number): string {
  return s.length > n ? `${s.slice(0, n - 1)}…` : s;
}

function engineLine(e: EngineFigures): string {
  const kv = e.kvBlocksUsed + e.kvBlocksCached + e.kvBlocksFree;
  return (
    `v${e.version}: ${e.running} running, ${e.waiting} waiting; KV blocks ${e.kvBlocksUsed} used, ${e.kvBlocksCached} cached, ${e.kvBlocksFree} free of ${kv}; ` +
    `${e.decodeTokensPerSec.toFixed(0)} tokens/s; prefix-cache hit rate ${(100 * e.prefixHitRate).toFixed(0)}%; ${e.preemptions} preemptions`
  );
}

function printReport(run: string, url: string, status: string | undefined, h: RunHealth, consumers: ConsumerBacklog[], idle: string[]): void {
  const lines: string[] = [];
  lines.push(`run ${run} (status ${status ?? "unknown"}) at ${url}: ${h.healthy ? "healthy" : `${h.problems.length} problem(s)`}`);
  if (h.instances.length === 0) lines.push("  no actor heartbeats");
  const row = (i: InstanceHealth) => {
    const log = i.lastLog ? `${i.lastLog.level} ${i.lastLog.time.slice(11, 19)} ${cut(i.lastLog.msg, 60)}` : "";
    return [
      instanceLabel(i.actor, i.instance).padEnd(16),
      i.verdict.padEnd(9),
      (i.state ?? "").padEnd(9),
      cut(i.what || "-", 40).padEnd(40),
      secs(i.forMs).padStart(8),
      `${secs(i.heartbeatAgeMs)} ago`.padStart(11),
      `  ${log}`,
    ].join(" ");
  };
  if (h.instances.length > 0) {
    lines.push(
      `  ${["INSTANCE".padEnd(16), "VERDICT".padEnd(9), "STATE".padEnd(9), "ON".padEnd(40), "FOR".padStart(8), "HEARTBEAT".padStart(11), "  LAST WARN/ERROR"].join(" ")}`,
    );
    for (const i of h.instances) lines.push(`  ${row(i)}`.trimEnd());
  }
  const engines = h.instances.filter((i) => i.engine && i.state !== "exited");
  if (engines.length > 0) {
    lines.push("inference engines:");
    for (const i of engines) lines.push(`  ${instanceLabel(i.actor, i.instance).padEnd(16)} ${engineLine(i.engine!)}`);
  }
  const remote = h.instances.filter((i) => i.remoteEnvs?.length && i.state !== "exited");
  if (remote.length > 0) {
    lines.push("remote environment servers:");
    for (const i of remote)
      for (const r of i.remoteEnvs!)
        lines.push(
          `  ${instanceLabel(i.actor, i.instance).padEnd(16)} ${r.env} at ${r.address}: ${r.healthy ? "answers health" : "DOES NOT ANSWER health"} (checked ${r.checkedAt}), ${r.inFlight} rollouts open`,
        );
  }
  if (consumers.length > 0) {
    lines.push("work consumers:");
    for (const c of consumers) {
      const oldest = c.oldest ? `; oldest unfinished seq ${c.oldest.seq}${c.oldest.msgId ? ` (${c.oldest.msgId})` : ""}, ${secs(c.oldest.ageMs)} old` : "";
      lines.push(`  ${c.consumer.padEnd(12)} ${c.subject}: ${c.pending} pending, ${c.ackPending} unacked, ${c.redelivered} redelivered${oldest}`);
    }
  }
  if (idle.length > 0) {
    lines.push("time split (busy vs waiting, since each process started):");
    for (const l of idle) lines.push(`  ${l}`);
  }
  if (h.problems.length > 0) {
    lines.push("problems:");
    for (const p of h.problems) lines.push(`  - ${p}`);
  }
  process.stdout.write(`${lines.join("\n")}\n`);
}
