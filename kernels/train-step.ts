// One optimizer step over packed micro-batches: gradients accumulate across micro-batches with the
// loss normalised by the loss tokens of the whole step, then clip + AdamW.
import type { ParsedLossSpec } from "./loss-spec.js";
import type { PolicyModel } from "./policy-model.js";
import { learningRate, type OptimizerConfig } from "./optimizer.js";
import { packSamples, type PackResult, type TrainSample } from "./packing.js";
import { isInputCaused, NonFiniteStepError } from "./train-errors.js";
import type { Zero1Optimizer } from "./zero1.js";
import { GSPO_SECOND_PASS_LOSS, gspoCoefficients, secondPass } from "./gspo.js";
import type { LoraAdapters } from "./lora.js";

export interface StepReport {
  loss: number;
  entropy: number;
  mismatchKl: number;
  maskedFraction: number;
  gradNorm: number;
  lr: number;
  tokens: number;
  lossTokens: number;
  tokensPerSec: number;
  ms: number;
  optimizerStep: number;
}

/**
 * One step; with `lora` the adapters take the optimizer step (the model's weights stay base + adapters), and `step`
 * with each micro-batch's index keys LoRA dropout's masks (GSPO's second pass redraws its first pass's masks: the
 * coefficients and the gradient are of the same forward).
 */
export async function trainOnSamples(
  model: PolicyModel,
  packed: PackResult,
  loss: ParsedLossSpec,
  opt: OptimizerConfig,
  lora?: LoraAdapters | null,
  step = 0,
): Promise<StepReport> {
  const t0 = performance.now();
  model.zeroGrad();
  const before = (micro: number) => lora?.beforeMicro(model, step, micro);
  const normalizer = Math.max(1, packed.lossTokens);
  let lossSum = 0,
    entropy = 0,
    kl = 0,
    masked = 0,
    lossTokens = 0;
  if (loss.name === "gspo") {
    // First pass: the learner's token logprobs (its gradient is discarded); then the sequence-level
    // coefficients; then the pass that trains (kernels/gspo.ts).
    const logp: Float32Array[] = [];
    for (const [m, mb] of packed.microBatches.entries()) {
      before(m);
      const s = await model.accumulate(mb, { name: "sft" }, normalizer, { tokenLogprobs: true });
      logp.push(s.tokenLogprobs!);
      entropy += s.entropySum;
      lossTokens += s.lossTokens;
    }
    model.zeroGrad();
    const g = gspoCoefficients(packed.microBatches, logp, loss, normalizer);
    for (const [m, mb] of packed.microBatches.entries()) {
      before(m);
      await model.accumulate(secondPass(mb, g.coefficients[m]!, logp[m]!), GSPO_SECOND_PASS_LOSS, normalizer);
    }
    lossSum = g.loss;
    kl = g.mismatchKlSum;
    masked = g.clippedTokens;
  } else {
    for (const [m, mb] of packed.microBatches.entries()) {
      before(m);
      const s = await model.accumulate(mb, loss, normalizer);
      lossSum += s.loss;
      entropy += s.entropySum;
      kl += s.mismatchKlSum;
      masked += s.maskedTokens;
      lossTokens += s.lossTokens;
    }
  }
  if (!Number.isFinite(lossSum)) {
    model.zeroGrad(); // the weights and moments are untouched: the step can be retried without these samples
    throw new NonFiniteStepError(`the step's loss is ${lossSum}: its samples overflow the objective`);
  }
  const stepOpt = { lr: opt.lr, beta1: opt.beta1, beta2: opt.beta2, eps: opt.eps, weightDecay: opt.weightDecay, maxGradNorm: opt.maxGradNorm };
  const r = lora ? lora.stepModel(model, stepOpt) : await model.step(stepOpt);
  // The kernels drop a step with a non-finite gradient (weights, moments and step count untouched).
  if (r.skipped) throw new NonFiniteStepError(`the step's gradient norm is ${r.gradNorm}: its samples overflow the gradient`);
  return stepReport({ loss: lossSum, entropy, kl, masked, lossTokens }, r, opt.lr, packed.totalTokens, performance.now() - t0);
}

/** Packs, schedules the learning rate for `step` of `totalSteps`, and trains one optimizer step. */
export async function runTrainStep(
  model: PolicyModel,
  samples: TrainSample[],
  loss: ParsedLossSpec,
  opt: OptimizerConfig,
  step: number,
  totalSteps: number,
  pack: { microBatchTokens: number; sharePrefix: boolean },
  lora?: LoraAdapters | null,
): Promise<StepReport> {
  const packed = packSamples(samples, pack.microBatchTokens, model.config.maxPositionEmbeddings, { sharePrefix: pack.sharePrefix });
  return trainOnSamples(model, packed, loss, { ...opt, lr: learningRate(opt, step, totalSteps) }, lora, step);
}

/**
 * One optimizer step of a learner rank (actors.learner.ranks > 1): every rank holds the whole step packed the same way
 * and trains micro-batches m with m % size == rank; the loss is normalised by the whole step's loss tokens, the
 * gradient summed over ranks by the ZeRO-1 step (kernels/zero1.ts), the statistics all-reduced, so every rank
 * returns the same report. A failure on one rank reaches every rank through that all-reduce, so none is left
 * blocked in a collective: a failure the input caused (the kernels refused it, a non-finite loss or gradient) throws
 * NonFiniteStepError-like input errors on every rank with the weights and moments untouched (rank 0 sets the
 * batches aside and plans the step again); any other failure throws too, and ends the job.
 */
export async function trainOnRanks(
  model: PolicyModel,
  packed: PackResult,
  loss: ParsedLossSpec,
  opt: OptimizerConfig,
  zero: Zero1Optimizer,
): Promise<StepReport> {
  if (loss.name === "gspo") throw new Error("learner ranks: rl.loss gspo needs every micro-batch's logprobs on one rank; set actors.learner.ranks: 1");
  const t0 = performance.now();
  model.zeroGrad();
  const normalizer = Math.max(1, packed.lossTokens);
  // loss, entropy, kl, masked, loss tokens, ranks whose input failed, ranks that failed otherwise
  const stats = new Float64Array(7);
  let failure: Error | undefined;
  try {
    for (const [m, mb] of packed.microBatches.entries()) {
      if (m % zero.size !== zero.rank) continue;
      const s = await model.accumulate(mb, loss, normalizer);
      stats[0]! += s.loss;
      stats[1]! += s.entropySum;
      stats[2]! += s.mismatchKlSum;
      stats[3]! += s.maskedTokens;
      stats[4]! += s.lossTokens;
    }
  } catch (e) {
    failure = e as Error;
    stats[isInputCaused(e) ? 5 : 6]! += 1;
  }
  zero.comm.allReduceSum(stats);
  if (stats[6]! > 0) throw failure ?? new Error(`learner ranks: ${stats[6]} other rank(s) failed this step (see their logs)`);
  if (stats[5]! > 0 || !Number.isFinite(stats[0]!)) {
    model.zeroGrad();
    if (failure) throw failure;
    throw new NonFiniteStepError(
      stats[5]! > 0 ? "another rank's kernels refused this step's input" : `the step's loss is ${stats[0]}: its samples overflow the objective`,
    );
  }
  const r = await zero.step({ lr: opt.lr, beta1: opt.beta1, beta2: opt.beta2, eps: opt.eps, weightDecay: opt.weightDecay, maxGradNorm: opt.maxGradNorm });
  if (r.skipped) throw new NonFiniteStepError(`the step's gradient norm is ${r.gradNorm}: its samples overflow the gradient`);
  const sums = { loss: stats[0]!, entropy: stats[1]!, kl: stats[2]!, masked: stats[3]!, lossTokens: stats[4]! };
  return stepReport(sums, r, opt.lr, packed.totalTokens, performance.now() - t0);
}

/** A step's report from its sums over the loss tokens (entropy, mismatch KL and masked tokens become per-token means). */
function stepReport(
  sums: { loss: number; entropy: number; kl: number; masked: number; lossTokens: number },
  r: { gradNorm: number; step: number },
  lr: number,
  tokens: number,
  ms: number,
): StepReport {
  const perToken = (x: number) => x / Math.max(1, sums.lossTokens);
  return {
    loss: sums.loss,
    entropy: perToken(sums.entropy),
    mismatchKl: perToken(sums.kl),
    maskedFraction: perToken(sums.masked),
    gradNorm: r.gradNorm,
    lr,
    tokens,
    lossTokens: sums.lossTokens,
    tokensPerSec: tokens / (ms / 1000),
    ms,
    optimizerStep: r.step,
  };
}
