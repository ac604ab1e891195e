// `rollstream replay`: restores a learner from a checkpoint and feeds it the scored batches that are
// still in the run's stream, from the checkpoint's position (or --from-seq), on the kernel backend the
// run recorded (cli/replay/backend.ts). On that backend every step must match the run's record bit for
// bit: this is how a bad step is debugged. --set re-runs the steps with a changed loss or advantage
// setting and shows both side by side; --export writes the steps to a bundle that --bundle replays on
// another machine without NATS.
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import type { Command } from "commander";
import { UsageError } from "../errors.js";
import { Kvm } from "@nats-io/kv";
import { ConfigError, loadRunConfig, type RunConfig } from "../../actors/runtime/config.js";
import { connectNats } from "../../actors/runtime/nats-connect.js";
import { modelConfigOf } from "../../actors/runtime/model-factory.js";
import { CheckpointDir } from "../../actors/runtime/checkpoint-dir.js";
import { PolicyModel } from "../../kernels/index.js";
import type { ModelConfig } from "../../kernels/model-config.js";
import { readSafetensorsMetadata } from "../../kernels/safetensors.js";
import { decodeTrainStateWithLora } from "../../kernels/train-state.js";
import type { NatsConnection } from "@nats-io/transport-node";
import { openWire, readPayload, readStepRecords, RunChannels, RunState, StateKeys, type BatchSource, type ScoredReader } from "../../streams/index.js";
import { natsForRun } from "../run-nats.js";
import { matchBackend, type RecordedBackend } from "../replay/backend.js";
import { readBundle, writeBundle, type CapturedStep } from "../replay/bundle.js";
import { compareFigures, recordedStepsOf, type RecordedSteps } from "../replay/figures.js";
import { ReplayOutput } from "../replay/output.js";
import { applySettings, SettingError, type ChangedSettings } from "../replay/settings.js";
import { bundleSource, recordedSeqs, streamSource, type StepSource } from "../replay/sources.js";
import { replaySteps, type ReplayLoop } from "../replay/steps.js";

export interface ReplayOptions {
  config?: string;
  run?: string;
  outDir?: string;
  checkpoint?: string;
  fromSeq?: string;
  steps?: string;
  nats?: string;
  json?: boolean;
  verbose?: boolean;
  set?: string[];
  export?: string;
  bundle?: string;
}

export function registerReplayCommand(program: Command): void {
  program
    .command("replay")
    .description("re-run learner steps from a checkpoint over the stored scored batches, on the run's kernel backend, and compare with the record")
    .option("-c, --config <file>", "the run's config")
    .option("--run <run>", "the run's name: its config is read from <out-dir>/<run>/config.yaml (train keeps a copy there)")
    .option("--out-dir <dir>", "where run folders live", "runs")
    .option("--checkpoint <step>", "checkpoint step to start from (default: the oldest kept)")
    .option("--from-seq <seq>", "stream sequence to start reading scored batches from (default: the checkpoint's)")
    .option("--steps <n>", "steps to replay (default 3; with --bundle, all it holds)")
    .option("--nats <url>", "NATS server")
    .option("--json", "print one JSON object per step (the rest goes to stderr, the run's whole sgemm route table included)")
    .option("--verbose", "also print the run's whole sgemm route table (otherwise counted in one line)")
    .option(
      "--set <key=value>",
      "replay with a changed rl.loss.* or advantage setting and show both side by side (repeatable)",
      (v: string, all: string[]) => [...all, v],
      [],
    )
    .option("--export <dir>", "write the steps (Arrow batches, checkpoint, config, backend, record) to a bundle instead of replaying them")
    .option("--bundle <dir>", "replay a bundle written by --export (no NATS server needed)")
    .action(async (opts: ReplayOptions) => {
      process.exitCode = await replay(opts);
    });
}

export async function replay(opts: ReplayOptions): Promise<number> {
  try {
    checkUsage(opts);
    return opts.bundle ? await replayBundle(opts, opts.bundle) : await replayRun(opts);
  } catch (e) {
    // One line, never a stack: a config's problems are joined.
    const message = e instanceof ConfigError ? `invalid config ${e.source}: ${e.problems.map((p) => p.split("\n")[0]).join("; ")}` : (e as Error).message;
    process.stderr.write(`replay: ${message}\n`);
    return e instanceof UsageError || e instanceof SettingError ? 2 : 1;
  }
}

function checkUsage(opts: ReplayOptions): void {
  if (opts.steps !== undefined && !/^[1-9]\d*$/.test(opts.steps)) throw new UsageError(`--steps must be a positive integer (got ${opts.steps})`);
  for (const [flag, v] of [
    ["--checkpoint", opts.checkpoint],
    ["--from-seq", opts.fromSeq],
  ] as const) {
    if (v !== undefined && !/^\d+$/.test(v)) throw new UsageError(`${flag} must be a non-negative integer (got ${v})`);
  }
  if (opts.bundle) {
    const extra = Object.entries({
      "--config": opts.config,
      "--run": opts.run,
      "--checkpoint": opts.checkpoint,
      "--from-seq": opts.fromSeq,
      "--nats": opts.nats,
      "--export": opts.export,
    })
      .filter(([, v]) => v !== undefined)
      .map(([k]) => k);
    if (extra.length) throw new UsageError(`--bundle holds its own config, checkpoint and samples: drop ${extra.join(", ")}`);
  } else if (!opts.config && !opts.run) throw new UsageError("replay needs --run <run>, --config <file> or --bundle <dir>");
  if (opts.export && opts.set?.length) throw new UsageError("--export writes the run as recorded: use --set when replaying the bundle");
}

/** The checkpoint's step and stream position, read from its metadata (no model needed). */
function checkpointPosition(state: Uint8Array, where: string): { step: number; readerSeq: number; consumedAhead: number[] } {
  const meta = readSafetensorsMetadata(state);
  const step = Number(meta.step);
  const readerSeq = Number(meta.readerSeq);
  if (meta.format !== "rollstream-train-state-1" || !Number.isInteger(step) || !Number.isInteger(readerSeq)) {
    throw new Error(`${where} is not a rollstream training state`);
  }
  // rl.staleness pace: messages past readerSeq the learner had already trained on.
  const consumedAhead = meta.consumedAhead ? meta.consumedAhead.split(",").map(Number) : [];
  return { step, readerSeq, consumedAhead };
}

/** The run's config and the checkpoint replay starts from: all read and checked before any server is started. */
interface RunStart {
  config: RunConfig;
  configText: string;
  runDir: string;
  dir: CheckpointDir;
  start: number;
  state: Uint8Array;
  position: ReturnType<typeof checkpointPosition>;
  changed: ChangedSettings | null;
  fromSeq: number;
}

/** What the run recorded in NATS, and a reader of its scored batches from the start position. */
interface RunRecord {
  wire: ReturnType<typeof openWire>;
  channels: RunChannels;
  backend: RecordedBackend | null;
  recorded: RecordedSteps;
  follow: Map<number, number[]>;
  reader: ScoredReader;
}

async function replayRun(opts: ReplayOptions): Promise<number> {
  const run = runStart(opts);
  const out = new ReplayOutput(opts.json === true);
  const served = await natsForRun(run.runDir, run.config.nats.url, opts.nats);
  try {
    const nc = await connectNats(served.url, "rollstream-replay");
    try {
      const rec = await readRunRecord(nc, run, out);
      const steps = Number(opts.steps ?? 3);
      if (opts.export) return await exportFromStream(opts.export, run, rec, steps);
      out.say(`replaying run ${run.config.run} from checkpoint step ${run.position.step} (stream seq ${run.fromSeq})`);
      return await replayWith({
        source: streamSource(rec.reader, run.config, undefined, rec.follow),
        record: replayRecorder(rec.channels, run.changed),
        state: run.state,
        model: modelConfigOf(run.config),
        config: run.config,
        changed: run.changed,
        recorded: rec.recorded,
        backend: rec.backend,
        steps,
        out,
        verbose: opts.verbose === true,
      });
    } finally {
      await nc.close();
    }
  } finally {
    await served.stop();
  }
}

function runStart(opts: ReplayOptions): RunStart {
  const configPath = opts.config ?? join(opts.outDir ?? "runs", opts.run!, "config.yaml");
  if (!opts.config && !existsSync(configPath)) throw new Error(`no run ${opts.run} under ${opts.outDir ?? "runs"} (${configPath} is missing)`);
  if (opts.export && existsSync(opts.export) && readdirSync(opts.export).length > 0) throw new Error(`${opts.export} is not empty: export into a new folder`);
  const config = loadRunConfig(configPath);
  const configText = readFileSync(configPath, "utf8");
  const runDir = resolve(config.outDir, config.run);
  const root = join(runDir, "checkpoints");
  const kept = existsSync(root) ? new CheckpointDir(root, config.run).steps() : [];
  if (kept.length === 0) throw new Error(`no checkpoints under ${root}`);
  const start = opts.checkpoint !== undefined ? Number(opts.checkpoint) : Math.min(...kept);
  if (!kept.includes(start)) throw new Error(`no checkpoint at step ${start} under ${root} (kept: ${kept.join(", ")})`);
  const dir = new CheckpointDir(root, config.run);
  const { state } = dir.read(start);
  const position = checkpointPosition(state, dir.dirFor(start));
  // Before any server is started: a bad --set is a one-line error at once.
  const changed = opts.set?.length ? applySettings(configText, config, opts.set) : null;
  const fromSeq = opts.fromSeq !== undefined ? Number(opts.fromSeq) : position.readerSeq;
  return { config, configText, runDir, dir, start, state, position, changed, fromSeq };
}

async function readRunRecord(nc: NatsConnection, run: RunStart, out: ReplayOutput): Promise<RunRecord> {
  const wire = openWire(nc, run.config.run);
  const kv = await new Kvm(nc).open(wire.names.kvBucket).catch(() => null);
  const backend = kv ? ((await new RunState(kv).get(StateKeys.learnerBackend)) ?? null) : null;
  const channels = new RunChannels(wire);
  const recorded = recordedStepsOf((await readStepRecords(channels.steps, { firstWaitMs: 1000 })).values());
  // The learner dead-lettered such a batch and trained without it; replay does the same, loudly. That
  // includes batches it set aside after reading them (they broke a step, or it kept dying on them).
  const setAside = await channels.deadLetters.originalSeqs(channels.scored.subject);
  for (const seq of run.position.consumedAhead) setAside.add(seq);
  const follow = recordedSeqs(recorded);
  const reader = channels.scored.reader(run.fromSeq, {
    actor: "replay",
    readOnly: true,
    skipSeqs: setAside,
    onDeadLetter: (m, reason) => out.say(`seq ${m.seq}: skipped undecodable batch (${reason})`),
  });
  return { wire, channels, backend, recorded, follow, reader };
}

/** Reads `steps` steps' batches as the learner took them (the payloads too), then writes them to a bundle. */
async function exportFromStream(target: string, run: RunStart, rec: RunRecord, steps: number): Promise<number> {
  const captured: CapturedStep[] = [];
  const payloadOf = (s: BatchSource) => readPayload({ data: s.msg.data, headers: s.msg.headers }, rec.wire.blobs);
  const source = streamSource(rec.reader, run.config, { steps: captured, payloadOf }, rec.follow);
  try {
    for (let i = 0; i < steps; i++) if (!(await source.next(run.position.step + i))) break;
  } finally {
    await source.close();
  }
  const { config, configText, dir, start, fromSeq } = run;
  return exportBundle(target, {
    config,
    configText,
    dir,
    start,
    fromSeq,
    backend: rec.backend,
    recorded: rec.recorded,
    captured,
    model: modelConfigOf(config),
  });
}

function exportBundle(
  target: string,
  e: {
    config: RunConfig;
    configText: string;
    dir: CheckpointDir;
    start: number;
    fromSeq: number;
    backend: RecordedBackend | null;
    recorded: RecordedSteps;
    captured: CapturedStep[];
    model: ModelConfig;
  },
): number {
  if (e.captured.length === 0) throw new Error(`no recorded samples after checkpoint step ${e.start}: nothing to export`);
  const stepsOut = e.captured.map((s) => s.version + 1);
  const { files, bytes } = writeBundle(target, {
    run: e.config.run,
    configText: e.configText,
    checkpointDir: e.dir.dirFor(e.start),
    checkpointStep: e.start,
    fromSeq: e.fromSeq,
    model: e.model,
    backend: e.backend,
    recorded: stepsOut.flatMap((s) => e.recorded.get(s)?.record ?? []),
    steps: e.captured,
  });
  console.log(
    `exported steps ${stepsOut[0]}-${stepsOut.at(-1)} of run ${e.config.run} from checkpoint step ${e.start}: ${files} Arrow batches (${(bytes / 1e6).toFixed(2)} MB), ` +
      `the checkpoint, config, recorded backend${e.backend ? "" : " (none: the run did not record one)"} and losses, to ${target}`,
  );
  console.log(`replay it anywhere, no NATS server needed: rollstream replay --bundle ${target}`);
  return 0;
}

async function replayBundle(opts: ReplayOptions, dir: string): Promise<number> {
  const bundle = readBundle(dir);
  const changed = opts.set?.length ? applySettings(bundle.configText, bundle.config, opts.set) : null;
  const held = bundle.manifest.steps.length;
  const steps = Math.min(held, Number(opts.steps ?? held));
  const out = new ReplayOutput(opts.json === true);
  out.say(`replaying bundle ${dir}: run ${bundle.manifest.run}, ${steps} of its ${held} steps from checkpoint step ${bundle.manifest.checkpoint}`);
  return replayWith({
    source: bundleSource(bundle),
    state: bundle.state,
    model: bundle.model,
    config: bundle.config,
    changed,
    recorded: bundle.recorded,
    backend: bundle.backend,
    steps,
    out,
    verbose: opts.verbose === true,
  });
}

/** Sets up the backend and the restored learner, then runs the steps. */
async function replayWith(r: {
  source: StepSource;
  state: Uint8Array;
  model: ModelConfig;
  config: RunConfig;
  changed: ChangedSettings | null;
  recorded: RecordedSteps;
  backend: RecordedBackend | null;
  steps: number;
  out: ReplayOutput;
  /** Print the whole route table too (--verbose). */
  verbose?: boolean;
  record?: ReplayLoop["record"];
}): Promise<number> {
  const { out, config } = r;
  // The threads the run's RL steps ran on, when it did not record them.
  const plan = matchBackend(r.backend, { device: config.model.device, threads: config.actors.learner.rlThreads ?? config.model.threads });
  let model: PolicyModel | undefined;
  try {
    for (const line of plan.lines) out.say(line);
    if (plan.routes && (r.verbose || out.json)) out.say(`  the run's sgemm routes: ${plan.routes}`);
    if (r.changed) {
      out.say(`replaying with ${r.changed.given.join(" ")}:`);
      for (const line of r.changed.summary) out.say(`  ${line}`);
      out.say("  each step trains on the recorded step's samples; from the checkpoint on, the model follows the changed setting");
    }
    model = PolicyModel.create(r.model, { threads: plan.threads, device: plan.device });
    const { counters, lora } = decodeTrainStateWithLora(model, r.state);
    return await replaySteps({
      model,
      lora,
      source: r.source,
      fromStep: counters.step,
      steps: r.steps,
      config: r.changed?.config ?? config,
      changed: r.changed,
      recorded: r.recorded,
      backendMatched: plan.matched,
      out,
      record: r.record
        ? (step, replayed, recorded, extra) =>
            r.record!(step, replayed, recorded, { ...extra, backendMatched: plan.matched === null ? -1 : Number(plan.matched) })
        : undefined,
    });
  } finally {
    await r.source.close();
    model?.dispose();
    plan.restore();
  }
}

/** Keeps each replayed step on rs.<run>.replays, one session per invocation, so the dashboard can show what
 *  replays found. A failure to record is said once and never stops the replay. */
function replayRecorder(channels: RunChannels, changed: ChangedSettings | null): ReplayLoop["record"] {
  const session = new Date().toISOString();
  const setting = changed ? changed.given.join(" ") : "";
  let failed = false;
  return async (step, replayed, recorded, extra) => {
    if (failed) return;
    const c = compareFigures(replayed, recorded);
    try {
      await channels.replays.publish({
        run: channels.wire.run,
        session,
        setting,
        step,
        time: Date.now(),
        samples: extra.samples,
        leftOut: extra.leftOut,
        replayed,
        recorded: recorded ?? null,
        exact: c.exact,
        maxRelDiff: c.maxRelDiff,
        figure: c.figure,
        backendMatched: extra.backendMatched ?? -1,
      });
    } catch (e) {
      failed = true;
      process.stderr.write(`replay: not recorded with the run (${(e as Error).message.split("\n")[0]})\n`);
    }
  };
}
