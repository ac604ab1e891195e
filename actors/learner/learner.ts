// The learner: optional SFT stage, then RL. It reads scored Arrow batches from its own position and
// never trains a sample staler than maxOffPolicySteps (counted by environment and length, never silent):
// rl.staleness drop reads in stream order and drops them; pace holds what has arrived and trains the
// oldest first (each step's stream sequences recorded in its StepRecord on rs.<run>.steps). It packs micro-batches, runs forward/backward/AdamW in the kernels (one optimizer step per batchSize samples),
// and publishes each new policy version: safetensors in the object store, then KV policy.version.
// Every checkpoint.interval steps it hands the full training state to the checkpoint actor.
import { inject, injectable } from "tsyringe";
import { Tokens } from "../runtime/tokens.js";
import type { Actor, ActorContext } from "../runtime/actor.js";
import { packSettingsOf, type OptimizerConfig } from "../runtime/config.js";
import { loadRunEnvironments } from "../runtime/environments.js";
import { createPolicyModel, createTokenizer, rolloutLimitsOf } from "../runtime/model-factory.js";
import { blasInUse, parseBackendInfo, type PolicyModel } from "../../kernels/index.js";
import {
  checkRolloutLimits,
  readStepRecords,
  rejectReasonOf,
  StateKeys,
  type CheckpointChannel,
  type DeadLetterChannel,
  type RestoreChannel,
  type RunState,
  type ScoredChannel,
  type BatchSource,
  type RolloutRow,
  type ScoredReader,
  type StepChannel,
  type StepRecord,
  type WeightsChannel,
} from "../../streams/index.js";
import type { TrainSample } from "../../kernels/packing.js";
import { sftBatch } from "./sft-data.js";
import { decodeTrainStateWithLora, encodeTrainState, type TrainCounters } from "../../kernels/train-state.js";
import { LoraAdapters, loraTargets } from "../../kernels/lora.js";
import { paramsSafetensors, toPeft } from "../../kernels/lora-peft.js";
import { runTrainStep, type StepReport } from "../../kernels/train-step.js";
import type { ParsedLossSpec } from "../../kernels/loss-spec.js";
import { StepGuard, type CollectedBatch } from "./step-guard.js";
import { StepSelector } from "../../rl/sample-selection.js";
import { tallyStaleness } from "../../rl/staleness-tally.js";
import { passRate } from "../../rl/group-filter.js";
import { nativeComm, resolveBackend } from "../../kernels/native.js";
import { RankGroup } from "../../kernels/rank-group.js";
import { learningRate } from "../../kernels/optimizer.js";

@injectable()
export class LearnerActor implements Actor {
  private model!: PolicyModel;
  private counters: TrainCounters = { step: 0, sftDone: false, readerSeq: 1, droppedStale: 0, samplesSeen: 0, optimizerStep: 0 };
  /** The sgemm routes last written to learner.backend, and the RL step this life started at; unset before RL. */
  private recorded: { routes: string | undefined; step: number } | undefined;
  /** model.lora: the adapters RL trains (null before RL starts, and without LoRA). */
  private lora: LoraAdapters | null = null;
  /** sha256 of the LoRA base this learner published (model.lora.ship adapter). */
  private loraBaseSha: string | undefined;
  /** actors.learner.ranks > 1: this process is rank 0 and drives the others (kernels/rank-group.ts); null with one rank. */
  private group: RankGroup | null = null;

  constructor(
    @inject(Tokens.Context) private readonly ctx: ActorContext,
    @inject(Tokens.RunState) private readonly state: RunState,
    @inject(Tokens.Scored) private readonly scored: ScoredChannel,
    @inject(Tokens.Weights) private readonly weights: WeightsChannel,
    @inject(Tokens.Checkpoints) private readonly checkpoints: CheckpointChannel,
    @inject(Tokens.Restore) private readonly restoreChannel: RestoreChannel,
    @inject(Tokens.DeadLetters) private readonly deadLetters: DeadLetterChannel,
    @inject(Tokens.Steps) private readonly steps: StepChannel,
  ) {}

  async run(): Promise<void> {
    const { ctx } = this;
    const { config, log } = ctx;
    this.model = createPolicyModel(config, { threads: config.model.threads, log: ctx.log });
    log.info({ params: this.model.numParams, device: this.model.device }, "model ready");
    // With ranks, the group shards the moments before a checkpoint fills them: no rank ever holds them whole.
    if (config.actors.learner.ranks > 1) this.joinRanks();
    const restored = await this.restore();
    // The others load the state this rank starts from (a fresh one carries no moments: every rank starts zeros).
    await this.group?.loadState(restored ?? encodeTrainState(this.model, this.counters, this.lora, "", "fresh"), this.lora);
    await this.train();
    // The followers leave with rank 0 after a drain or at the end. Not after an error: a follower may be inside a
    // collective this rank never reaches, so the error ends the process and mpirun ends the job.
    await this.group?.stop();
  }

  /** Rank 0 of actors.learner.ranks: joins the communicator; the group keeps this rank's slice of the moments. */
  private joinRanks(): void {
    const { rank, size } = nativeComm().init();
    const want = this.ctx.config.actors.learner.ranks;
    if (rank !== 0 || size !== want)
      throw new Error(`learner: MPI says rank ${rank} of ${size}; actors.learner.ranks is ${want} (start it with rollstream actor learner)`);
    this.group = new RankGroup(this.model, nativeComm(), rank, size);
    this.ctx.log.info({ ranks: size, momentsPerRank: this.group.zero.count }, "learner ranks: ZeRO-1 over MPI");
  }

  private async train(): Promise<void> {
    const { ctx } = this;
    const { config } = ctx;
    if (ctx.signal.aborted) return;

    if (!this.counters.sftDone) {
      // With model.lora (and lora.sft, the default), SFT and RL train the same adapters on a base that stays frozen
      // throughout, so the adapters are the whole fine-tune (what a PEFT export or an engine serving base + adapter
      // needs). With lora.sft false, SFT trains every weight and RL starts fresh adapters on what it left.
      if (config.model.lora?.sft) await this.startLora();
      if (config.sft) await this.runSft();
      if (ctx.signal.aborted) return;
      this.counters.sftDone = true;
      // RL starts with fresh optimizer moments (with LoRA: the adapters' moments; adapters SFT trained stay).
      if (this.group) await this.group.freshMoments();
      else this.model.resetOptimizer();
      if (this.lora) this.lora.resetOptimizer();
      else await this.startLora();
      await this.publishWeights(0, config.sft ? "sft" : "rl");
      await this.saveState();
    } else {
      // A restored learner republishes its version so inference and the orchestrator line up with it.
      await this.publishWeights(this.counters.step, "rl");
    }
    await this.state.put(StateKeys.runPhase, "rl");
    await this.runRl();
  }

  /** The training state restored (its bytes, for the other ranks), or null when the run starts fresh. */
  private async restore(): Promise<Uint8Array | null> {
    const { ctx } = this;
    const deadline = Date.now() + 60_000;
    while (!ctx.signal.aborted) {
      try {
        const r = await this.restoreChannel.request(30_000);
        if (r.error) throw new Error(r.error);
        if (r.step < 0 || !r.object) {
          ctx.log.info("no checkpoint: starting fresh");
          return null;
        }
        const bytes = await this.checkpoints.takeObject(r.object);
        const restored = decodeTrainStateWithLora(this.model, bytes);
        this.counters = restored.counters;
        this.lora = restored.lora;
        this.checkLoraMatchesConfig();
        ctx.log.info({ ...this.counters, lora: this.lora !== null }, "restored from checkpoint");
        return bytes;
      } catch (e) {
        if (Date.now() > deadline) throw new Error(`no checkpoint actor answered the restore request: ${(e as Error).message}`);
        await new Promise((r) => setTimeout(r, 500));
      }
    }
    return null;
  }

  private async startLora(): Promise<void> {
    const settings = this.ctx.config.model.lora;
    if (!settings) return;
    this.lora = new LoraAdapters(settings, loraTargets(this.model.tensors(), settings), this.model.getParams());
    this.lora.load(this.model);
    // actors.learner.ranks > 1: the other ranks take these very adapters (and their moments) from a state plan.
    await this.group?.loadState(encodeTrainState(this.model, this.counters, this.lora), this.lora);
    // With dropout > 0 the backend takes the adapters now, so one that cannot (CUDA) says so at start, not at step 1.
    this.lora.beforeMicro(this.model, 0, 0);
    const size = this.lora.params.length;
    this.ctx.log.info(
      {
        rank: settings.rank,
        targets: this.lora.targets.length,
        adapterParams: size,
        ofModel: size / this.model.numParams,
        ...(this.group?.adapters ? { adapterMomentsPerRank: this.group.adapters.count } : {}),
      },
      "LoRA: training adapters",
    );
  }

  /** A run resumes as it was trained: a checkpoint with adapters needs model.lora, one of full RL must not have it. */
  private checkLoraMatchesConfig(): void {
    const want = this.ctx.config.model.lora !== undefined;
    if (!this.counters.sftDone || want === (this.lora !== null)) return;
    throw new Error(
      want
        ? "the checkpoint's RL trained every weight, but model.lora is set: remove it to resume, or start a fresh run"
        : "the checkpoint's RL trained LoRA adapters, but model.lora is not set: set it as it was to resume",
    );
  }

  private async runSft(): Promise<void> {
    const { ctx } = this;
    const sft = ctx.config.sft!;
    const envs = [...(await loadRunEnvironments(ctx.config)).values()];
    const tokenizer = createTokenizer(ctx.config);
    await this.state.put(StateKeys.runPhase, "sft");
    ctx.log.info({ steps: sft.steps, batchSize: sft.batchSize }, "SFT stage");
    for (let s = 0; s < sft.steps && !ctx.signal.aborted; s++) {
      const samples = sftBatch(envs, tokenizer, sft.seed, s, sft.batchSize);
      const report = await ctx.health.work(`sft step ${s + 1}`, () => this.trainStep(samples, { name: "sft" }, sft.optimizer, s, sft.steps));
      await ctx.publishMetrics("sft", { sftStep: s + 1, sftSteps: sft.steps, ...flatReport(report) }, s + 1);
    }
  }

  private async runRl(): Promise<void> {
    const { ctx } = this;
    const { config, log } = ctx;
    const rl = config.rl;
    // SFT had the machine to itself; during RL inference runs next to us, and an oversubscribed OpenMP
    // team waits on descheduled peers at every barrier.
    const rlThreads = config.actors.learner.rlThreads;
    if (rlThreads !== undefined && rlThreads !== this.model.threads) {
      this.model.setThreads(rlThreads);
      log.info({ threads: rlThreads }, "learner threads for RL");
    }
    await this.pinEarlierRoutes();
    await this.recordBackend();
    const reader = await this.openScoredReader();
    const selector = new StepSelector<RolloutRow, BatchSource>(reader);
    const gauges = {
      step: ctx.metrics.gauge("learner_step", "RL optimizer steps done"),
      held: ctx.metrics.gauge("learner_held_rows", "rl.staleness pace: rows read and held for a later step"),
    };
    gauges.step.set(this.counters.step);
    // pace: which messages a step takes depends on when they arrived. A learner restored from a checkpoint
    // redoes the steps its earlier life trained after it on exactly the messages that life recorded.
    const redo = rl.staleness === "pace" ? await this.recordedPacedSteps(this.counters.step) : new Map<number, number[]>();
    if (redo.size > 0) log.info({ from: this.counters.step, steps: redo.size }, "redoing the earlier life's paced steps on the messages it recorded");
    const guard = new StepGuard(ctx, this.model, reader, this.scored.stepAttempts(), (b) =>
      this.trainStep(b.kept, rl.loss, rl.optimizer, this.counters.step, rl.steps),
    );
    try {
      while (this.counters.step < rl.steps && !ctx.signal.aborted) {
        const done = await this.trainOneStep(selector, guard, redo.get(this.counters.step));
        if (!done) break;
        gauges.step.set(this.counters.step);
        if (rl.staleness === "pace") gauges.held.set(selector.heldRowCount);
        if (this.counters.step % config.checkpoint.interval === 0 || this.counters.step === rl.steps) await this.saveState();
      }
    } finally {
      await reader.close();
    }
  }

  /** The scored reader from the checkpointed position, passing over what this run set aside, validating what it reads. */
  private async openScoredReader(): Promise<ScoredReader> {
    const { ctx } = this;
    const deadLetters = ctx.metrics.counter("dead_letters_total", "messages sent to the dead-letter subject, by reason", ["reason"]);
    // Batches an earlier life of this learner set aside: passed over when steps are recomputed after a
    // restore, as replay passes over them, so both see the batches the run trained on.
    const setAside = await this.deadLetters.originalSeqs(this.scored.subject);
    // pace: what the checkpointed learner had trained past the first message it still held.
    for (const seq of this.counters.consumedAhead ?? []) setAside.add(seq);
    return this.scored.reader(this.counters.readerSeq, {
      skipSeqs: setAside,
      actor: ctx.actor,
      onTrouble: (what) => ctx.log.warn({ what }, "scored reader"),
      onDeadLetter: (msg, reason) => {
        deadLetters.inc({ reason: rejectReasonOf(reason) });
        ctx.log.warn({ seq: msg.seq, err: reason }, "scored batch dead-lettered");
      },
      // Nothing reaches the kernels that they would reject or that would steer a step: ids in the
      // vocabulary, rows within the context, no version from the future, advantages within bounds.
      validate: (rows) => {
        const limits = rolloutLimitsOf(ctx.config, this.counters.step);
        rows.forEach((r, i) => {
          checkRolloutLimits(r, limits, `row ${i} (task ${r.taskId})`);
        });
      },
    });
  }

  /** Collects, trains and publishes one RL step (following `follow`'s messages when set); false when stopped. */
  private async trainOneStep(selector: StepSelector<RolloutRow, BatchSource>, guard: StepGuard, follow: number[] | undefined): Promise<boolean> {
    const { ctx } = this;
    const rl = ctx.config.rl;
    const version = this.counters.step;
    const collectOpts = {
      batchSize: rl.batchSize,
      maxOffPolicySteps: rl.maxOffPolicySteps,
      staleness: rl.staleness,
      ...(follow ? { follow } : {}),
      signal: ctx.signal,
      // Tell the orchestrator when we wait on samples (dropped as stale or dead-lettered samples are never
      // coming): it tops the pipeline up if nothing is in flight.
      onIdle: (missing: number) => {
        ctx.health.note(`for step ${version + 1} (${rl.batchSize - missing} of ${rl.batchSize})`);
        return this.state.put(StateKeys.learnerStarved, { step: version, missing });
      },
    };
    const samples = { detail: `for step ${version + 1}` };
    // The step-time breakdown (the dashboard's chart): waiting for samples, training, publishing weights.
    const waitStart = performance.now();
    let batch: CollectedBatch | null = await ctx.health.wait("samples", () => selector.collect(version, collectOpts), samples);
    let waitMs = performance.now() - waitStart;
    let report: StepReport | undefined;
    while (batch && !ctx.signal.aborted) {
      const collected = batch;
      const outcome = await ctx.health.work(`train step ${version + 1}`, () => guard.step(version, collected, rl.loss));
      if ("report" in outcome) {
        report = outcome.report;
        break;
      }
      const retryStart = performance.now();
      batch = await ctx.health.wait("samples", () => selector.collect(version, collectOpts, outcome.retry), samples);
      waitMs += performance.now() - retryStart;
    }
    if (!batch || !report || ctx.signal.aborted) return false;
    if (rl.staleness === "pace") {
      const resume = selector.resumePoint();
      this.counters.readerSeq = resume.seq;
      this.counters.consumedAhead = resume.consumedAhead;
    } else this.counters.readerSeq = selector.position;
    this.counters.droppedStale += batch.dropped;
    this.counters.samplesSeen += batch.kept.length + batch.dropped;
    this.counters.step = version + 1;
    const publishStart = performance.now();
    await this.publishWeights(this.counters.step, "rl");
    const timings = { waitMs, trainMs: report.ms, publishMs: performance.now() - publishStart };
    await this.recordStep(version, batch, report, timings, rl.staleness === "pace" ? selector.heldRowCount : undefined);
    return true;
  }

  /** The step's StepRecord on rs.<run>.steps (what restart, replay and the dashboard read) and its Prometheus counters. */
  private async recordStep(
    version: number,
    batch: CollectedBatch,
    report: StepReport,
    timings: StepRecord["timings"],
    heldRows: number | undefined,
  ): Promise<void> {
    const { ctx } = this;
    const rl = ctx.config.rl;
    const { kept } = batch;
    const tally = tallyStaleness(version, kept, batch.droppedRows, rl.sampling.maxTokens);
    const cells = ctx.metrics.counter(
      "samples_staleness_total",
      "samples by outcome (trained; delayed: trained at staleness > 0; droppedStale: past maxOffPolicySteps), environment and length quarter of maxTokens",
      ["outcome", "env", "length"],
    );
    for (const c of tally.cells) cells.inc({ outcome: c.outcome, env: c.env, length: c.length }, c.count);
    ctx.metrics.counter("samples_dropped_stale_total", "samples older than maxOffPolicySteps, dropped").inc(batch.dropped);
    const rewardMean = kept.reduce((s, r) => s + r.reward, 0) / Math.max(1, kept.length);
    await this.steps.publish({
      run: ctx.config.run,
      step: this.counters.step,
      steps: rl.steps,
      time: Date.now(),
      staleness: rl.staleness,
      // Under pace the messages a step takes depend on arrival: a restored learner and replay follow these.
      seqs: batch.sources.map((s) => s.msg.seq),
      rows: { trained: kept.length, delayed: tally.rows.delayed, droppedStale: batch.dropped },
      droppedStaleTotal: this.counters.droppedStale,
      ...(heldRows !== undefined ? { heldRows } : {}),
      cells: tally.cells,
      stalenessMean: batch.stalenessMean,
      stalenessMax: batch.stalenessMax,
      loss: report.loss,
      gradNorm: report.gradNorm,
      entropy: report.entropy,
      mismatchKl: report.mismatchKl,
      maskedFraction: report.maskedFraction,
      lr: report.lr,
      tokens: report.tokens,
      lossTokens: report.lossTokens,
      tokensPerSec: report.tokensPerSec,
      rewardMean,
      passRate: passRate(kept.map((r) => r.reward)),
      timings,
      backend: this.model.device,
    });
    ctx.log.info({ step: this.counters.step, loss: report.loss, rewardMean, dropped: batch.dropped }, "step");
  }

  private async trainStep(samples: TrainSample[], loss: ParsedLossSpec, opt: OptimizerConfig, step: number, totalSteps: number): Promise<StepReport> {
    const pack = packSettingsOf(this.ctx.config);
    const report = this.group
      ? await this.group.train(samples, loss, { ...opt, lr: learningRate(opt, step, totalSteps) }, pack, step)
      : await runTrainStep(this.model, samples, loss, opt, step, totalSteps, pack, this.lora);
    this.counters.optimizerStep = report.optimizerStep;
    // The CPU sgemm dispatcher measures each shape class at its first product: record the routes it chose.
    if (this.recorded && this.backendInfo().blasRoutes !== this.recorded.routes) await this.recordBackend();
    return report;
  }

  private backendInfo() {
    return parseBackendInfo(resolveBackend(this.model.device).backend.info());
  }

  /**
   * Writes learner.backend: what decides the bits of every RL step, for `rollstream replay` to match (or to say why
   * it cannot). Written when RL starts and again whenever the sgemm routes grow, so the last record covers every step.
   */
  private async recordBackend(): Promise<void> {
    const be = this.backendInfo();
    const blasDispatch = blasInUse(be);
    this.recorded = { routes: be.blasRoutes, step: this.recorded?.step ?? this.counters.step };
    if (be.blasDispatch) this.ctx.log.info({ blas: be.blas, routes: be.blasRoutes, dispatch: be.blasDispatch }, "sgemm routing");
    await this.state.put(StateKeys.learnerBackend, {
      device: this.model.device,
      blasDispatch,
      blas: be.blas,
      blasRoutes: be.blasRoutes,
      blasDecision: be.blasDispatch,
      simd: be.simd,
      // CUDA: what the model runs (the cuda_matmul setting, else bf16 when cuBLAS loaded): the info line reports it.
      matmul: be.matmul,
      abi: be.abi,
      threads: this.model.threads,
      threadIndependent: this.model.device === "cuda" || !blasDispatch, // our kernels give the same bits on any count
      step: this.recorded.step,
    });
  }

  /**
   * A restarted learner routes sgemm products as its earlier life measured (same library, same threads), so the
   * steps it recomputes and the ones after have the bits an uninterrupted run would have had.
   */
  private async pinEarlierRoutes(): Promise<void> {
    const earlier = await this.state.get(StateKeys.learnerBackend);
    const here = this.backendInfo();
    if (!earlier?.blasRoutes?.includes("=") || here.blasMode !== "auto" || earlier.blas !== here.blas || earlier.threads !== this.model.threads) return;
    const backend = resolveBackend(this.model.device).backend;
    backend.setSettings({ ...backend.settings(), blasRoutes: earlier.blasRoutes }); // pinned; later classes still measured
    this.ctx.log.info({ routes: earlier.blasRoutes }, "sgemm routes pinned as the earlier learner measured them");
  }

  /** The stream sequences the earlier lives of this learner recorded for steps after `fromStep`, by the version each trained from. */
  private async recordedPacedSteps(fromStep: number): Promise<Map<number, number[]>> {
    const out = new Map<number, number[]>();
    for (const r of (await readStepRecords(this.steps, { deadLetterAs: this.ctx.actor })).values()) if (r.step > fromStep) out.set(r.step - 1, r.seqs);
    return out;
  }

  private async publishWeights(version: number, phase: "sft" | "rl"): Promise<void> {
    await this.ctx.health.work(`publish weights v${version}`, async () => {
      if (this.lora?.settings.ship === "adapter") await this.publishAdapters(this.lora, version);
      return this.weights.publish({ version, step: this.counters.step, phase, bytes: this.model.toSafetensors() });
    });
    await this.state.put(StateKeys.policyVersion, version);
    await this.state.put(StateKeys.learnerStep, this.counters.step);
  }

  /**
   * model.lora.ship adapter: the version's adapters alone beside its merged weights (before its announcement), and
   * the frozen base they apply to once per learner life (not written again when unchanged).
   */
  private async publishAdapters(lora: LoraAdapters, version: number): Promise<void> {
    this.loraBaseSha ??= await this.weights.publishLoraBase(paramsSafetensors(this.model.tensors(), lora.baseOf(this.model.getParams())));
    await this.weights.publishAdapter(version, { ...toPeft(lora, this.ctx.config.model.path ?? ""), baseSha256: this.loraBaseSha });
  }

  private async saveState(): Promise<void> {
    const moments = await this.group?.gather(); // every rank's slice of the moments, for the full state
    await this.ctx.health.work(`publish training state step ${this.counters.step}`, () =>
      this.checkpoints.publish(this.counters.step, encodeTrainState(this.model, this.counters, this.lora, this.ctx.config.model.path ?? "", moments)),
    );
  }
}

function flatReport(r: StepReport): Record<string, number> {
  return {
    loss: r.loss,
    entropy: r.entropy,
    mismatchKl: r.mismatchKl,
    maskedFraction: r.maskedFraction,
    gradNorm: r.gradNorm,
    lr: r.lr,
    tokens: r.tokens,
    lossTokens: r.lossTokens,
    tokensPerSec: r.tokensPerSec,
    stepMs: r.ms,
  };
}
