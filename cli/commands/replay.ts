// `rollstream replay`: restores a learner from a checkpoint and feeds it the scored batches that are
// still in the run's stream, from the checkpoint's position (or --from-seq). On the CPU backend the
// losses must match the run's recorded ones bit for bit: this is how a bad step is debugged.
import { existsSync, readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import type { Command } from "commander";
import { loadRunConfig } from "../../actors/runtime/config.js";
import { connectNats } from "../../actors/runtime/nats-connect.js";
import { natsForRun } from "../run-nats.js";
import { createPolicyModel } from "../../actors/runtime/model-factory.js";
import { CheckpointDir } from "../../actors/runtime/checkpoint-dir.js";
import { decodeTrainState } from "../../kernels/train-state.js";
import { runTrainStep } from "../../kernels/train-step.js";
import { MetricsEventSchema, openWire, RunChannels } from "../../streams/index.js";

interface ReplayOptions {
  config?: string;
  run?: string;
  outDir?: string;
  checkpoint?: string;
  fromSeq?: string;
  steps: string;
  nats?: string;
  json?: boolean;
}

export function registerReplayCommand(program: Command): void {
  program
    .command("replay")
    .description("re-run learner steps from a checkpoint over the stored scored batches and compare the losses")
    .option("-c, --config <file>", "the run's config")
    .option("--run <run>", "the run's name: its config is read from <out-dir>/<run>/config.yaml (train keeps a copy there)")
    .option("--out-dir <dir>", "where run folders live", "runs")
    .option("--checkpoint <step>", "checkpoint step to start from (default: the oldest kept)")
    .option("--from-seq <seq>", "stream sequence to start reading scored batches from (default: the checkpoint's)")
    .option("--steps <n>", "steps to replay", "3")
    .option("--nats <url>", "NATS server")
    .option("--json", "print one JSON object per step")
    .action(async (opts: ReplayOptions) => {
      process.exitCode = await replay(opts);
    });
}

export interface ReplayStep {
  step: number;
  loss: number;
  recordedLoss: number | null;
  gradNorm: number;
  samples: number;
  exact: boolean | null;
}

export async function replay(opts: ReplayOptions): Promise<number> {
  const configPath = opts.config ?? (opts.run ? join(opts.outDir ?? "runs", opts.run, "config.yaml") : undefined);
  if (!configPath) {
    process.stderr.write("replay needs --config <file> or --run <run>\n");
    return 2;
  }
  const config = loadRunConfig(configPath);
  const runDir = resolve(config.outDir, config.run);
  const dir = new CheckpointDir(join(runDir, "checkpoints"), config.run);
  const steps = dir.steps();
  if (steps.length === 0) {
    process.stderr.write(`no checkpoints under ${join(runDir, "checkpoints")}\n`);
    return 1;
  }
  const start = opts.checkpoint !== undefined ? Number(opts.checkpoint) : Math.min(...steps);
  const { state } = dir.read(start);
  // The threads the run's RL steps ran on (BLAS may round differently on other thread counts).
  const model = createPolicyModel(config, { threads: config.actors.learner.rlThreads ?? config.model.threads });
  const counters = decodeTrainState(model, state);
  const recorded = recordedLosses(join(runDir, "metrics.jsonl"));
  const served = await natsForRun(runDir, config.nats.url, opts.nats);
  const nc = await connectNats(served.url, "rollstream-replay");
  const channels = new RunChannels(openWire(nc, config.run));
  // The learner dead-lettered such a batch and trained without it; replay does the same, loudly. That
  // includes batches it set aside after reading them (they broke a step, or it kept dying on them).
  const setAside = await channels.deadLetters.originalSeqs(channels.scored.subject);
  const reader = channels.scored.reader(opts.fromSeq !== undefined ? Number(opts.fromSeq) : counters.readerSeq, {
    actor: "replay",
    readOnly: true,
    skipSeqs: setAside,
    onDeadLetter: (m, reason) => console.log(`seq ${m.seq}: skipped undecodable batch (${reason})`),
  });
  let mismatches = 0;
  try {
    console.log(`replaying from checkpoint step ${counters.step} (stream seq ${reader.position})`);
    for (let i = 0; i < Number(opts.steps); i++) {
      const version = counters.step;
      const batch = await reader.collect(version, {
        batchSize: config.rl.batchSize,
        maxOffPolicySteps: config.rl.maxOffPolicySteps,
        waitMs: 1000,
        giveUpAfterIdleMs: 3000,
      });
      if (!batch) {
        console.log(`stream exhausted after ${i} steps`);
        break;
      }
      const r = await runTrainStep(model, batch.kept, config.rl.loss, config.rl.optimizer, version, config.rl.steps, config.rl.microBatchTokens);
      counters.step = version + 1;
      const rec = recorded.get(counters.step) ?? null;
      const exact = rec === null ? null : rec === r.loss;
      if (exact === false) mismatches++;
      const row: ReplayStep = { step: counters.step, loss: r.loss, recordedLoss: rec, gradNorm: r.gradNorm, samples: batch.kept.length, exact };
      console.log(
        opts.json
          ? JSON.stringify(row)
          : `step ${row.step}: loss ${row.loss} recorded ${row.recordedLoss ?? "-"} ${exact === null ? "" : exact ? "bit-exact" : "MISMATCH"} (grad norm ${r.gradNorm.toFixed(4)}, ${row.samples} samples)`,
      );
    }
  } finally {
    await reader.close();
    await nc.close();
    await served.stop();
    model.dispose();
  }
  return mismatches === 0 ? 0 : 1;
}

function recordedLosses(file: string): Map<number, number> {
  const out = new Map<number, number>();
  if (!existsSync(file)) return out;
  for (const line of readFileSync(file, "utf8").split("\n")) {
    if (!line) continue;
    const r = MetricsEventSchema.safeParse(JSON.parse(line));
    if (r.success && r.data.actor === "learner" && r.data.kind === "step" && r.data.step !== undefined && r.data.values.loss !== undefined) {
      out.set(r.data.step, r.data.values.loss);
    }
  }
  return out;
}
