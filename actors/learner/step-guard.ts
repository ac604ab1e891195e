// Trains one RL step so that no batch can stop the run. Two lines of defence behind the checks at the
// edge (vocabulary, context, versions, advantages):
// - A step that fails because of its input (the kernels refuse it, or its loss or gradient is not
//   finite) is retried without the batches that fail alone: each batch is tried by itself (forward and
//   backward, no update), those that fail are dead-lettered with the reason, the step is topped up with
//   fresh batches and trained. The weights and moments are untouched by a failed step, so the result is
//   the step the run would have taken without those batches, and a replay that skips them reproduces it.
// - A step whose attempt killed the learner (a native crash, the OOM killer, any error that is not the
//   input's) is recorded in the attempts ledger before it starts. After DEFAULT_CRASH_LIMIT such deaths
//   its batches are dead-lettered instead of being trained on again, so a restarted learner does not
//   crash-loop on them and a resumed run gets past them.
import type { PolicyModel } from "../../kernels/index.js";
import type { ParsedLossSpec } from "../../kernels/loss-spec.js";
import { packSamples } from "../../kernels/packing.js";
import { isInputCaused, NonFiniteStepError } from "../../kernels/train-errors.js";
import type { StepReport } from "../../kernels/train-step.js";
import { DEFAULT_CRASH_LIMIT, type AttemptLedger, type BatchSource, type RolloutRow, type ScoredReader } from "../../streams/index.js";
import type { CollectedBatch as Collected } from "../../rl/sample-selection.js";
import type { ActorContext } from "../runtime/actor.js";
import { packSettingsOf } from "../runtime/config.js";
import { failpoint } from "../runtime/failpoints.js";

/** A step's samples as the selection collected them from the scored stream. */
export type CollectedBatch = Collected<RolloutRow, BatchSource>;

export type StepOutcome = { report: StepReport } | { retry: CollectedBatch };

export class StepGuard {
  constructor(
    private readonly ctx: ActorContext,
    private readonly model: PolicyModel,
    private readonly reader: ScoredReader,
    private readonly attempts: AttemptLedger,
    private readonly train: (batch: CollectedBatch) => Promise<StepReport>,
  ) {}

  /** Trains `batch` as step `version`, or says which part of it to top up and try again. */
  async step(version: number, batch: CollectedBatch, loss: ParsedLossSpec): Promise<StepOutcome> {
    const seqs = batch.sources.map((s) => s.msg.seq);
    const id = `step-${version}.seq-${Math.min(...seqs)}-${Math.max(...seqs)}-${seqs.length}`;
    const died = await this.attempts.begin(id, this.ctx.instance, `step ${version} on stream seqs ${seqs.join(",")}`);
    if (died >= DEFAULT_CRASH_LIMIT) {
      const reason = `crash_loop: the learner died ${died} times training step ${version} on these ${seqs.length} batches; set aside so the run goes on`;
      this.ctx.log.error({ step: version, seqs }, reason);
      for (const s of batch.sources) await this.reader.reject(s.msg, reason);
      await this.attempts.end(id);
      return { retry: { ...batch, kept: [], sources: [] } };
    }
    failpoint(
      "learner.train",
      batch.kept.map((r) => r.taskId),
    );
    let report: StepReport;
    try {
      report = await this.train(batch);
    } catch (e) {
      // Not the input's fault: the record stays, so a learner that keeps dying here sets the step aside.
      if (!isInputCaused(e)) throw e;
      await this.attempts.end(id);
      return { retry: await this.setAsideFailing(version, batch, loss, e as Error) };
    }
    await this.attempts.end(id);
    return { report };
  }

  /** Tries each batch of a failed step alone; dead-letters those that fail and returns the rest. */
  private async setAsideFailing(version: number, batch: CollectedBatch, loss: ParsedLossSpec, stepError: Error): Promise<CollectedBatch> {
    const failing: Array<{ source: BatchSource; error: string }> = [];
    try {
      for (const source of batch.sources) {
        const error = await this.tryAlone(source, loss);
        if (error !== null) failing.push({ source, error });
      }
    } finally {
      this.model.zeroGrad();
    }
    // No batch fails alone, or every one does: the trouble is the model or the kernels, not the data.
    if (failing.length === 0 || (failing.length === batch.sources.length && batch.sources.length > 1)) {
      throw new Error(
        `step ${version} failed (${stepError.message}) and ${failing.length === 0 ? "no batch" : "every batch"} fails when trained alone: not a bad batch; stopping`,
      );
    }
    for (const { source, error } of failing) {
      const reason = `kernel: step ${version} failed on this batch (${source.rows.length} rows, task ${source.rows[0]?.taskId}): ${error}`;
      this.ctx.log.error({ step: version, seq: source.msg.seq }, reason);
      await this.reader.reject(source.msg, reason);
    }
    const bad = new Set(failing.map((f) => f.source));
    const sources = batch.sources.filter((s) => !bad.has(s));
    return { ...batch, sources, kept: sources.flatMap((s) => s.rows) };
  }

  /** Forward and backward of one batch's rows (gradients are discarded): the error it causes, or null. */
  private async tryAlone(source: BatchSource, loss: ParsedLossSpec): Promise<string | null> {
    const pack = packSettingsOf(this.ctx.config);
    const packed = packSamples(source.rows, pack.microBatchTokens, this.model.config.maxPositionEmbeddings, { sharePrefix: pack.sharePrefix });
    try {
      for (const mb of packed.microBatches) {
        const s = await this.model.accumulate(mb, loss, Math.max(1, packed.lossTokens));
        if (!Number.isFinite(s.loss)) throw new NonFiniteStepError(`its loss is ${s.loss}`);
      }
      return null;
    } catch (e) {
      if (!isInputCaused(e)) throw e;
      return (e as Error).message;
    }
  }
}
