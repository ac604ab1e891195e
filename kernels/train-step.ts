// One optimizer step over packed micro-batches: gradients accumulate across micro-batches with the
// loss normalised by the loss tokens of the whole step, then clip + AdamW.
import type { ParsedLossSpec } from "./loss-spec.js";
import type { PolicyModel, StepOptions, StepResult } from "./policy-model.js";
import { learningRate, type OptimizerConfig } from "./optimizer.js";
import { packSamples, type PackResult, type TrainSample } from "./packing.js";
import { isInputCaused, NonFiniteStepError } from "./train-errors.js";
import type { Zero1Optimizer } from "./zero1.js";
import { GSPO_SECOND_PASS_LOSS, gspoMicroBatch, gspoSequenceCount, secondPass, type GspoSpec, type GspoSums } from "./gspo.js";
import type { NativeComm } from "./native.js";
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

/** The step's sums over the loss tokens, what its report is made of. */
interface StepSums {
  loss: number;
  entropy: number;
  kl: number;
  masked: number;
  lossTokens: number;
}

/** Runs before micro-batch m of the step (LoRA dropout's masks); a no-op without LoRA. */
type BeforeMicro = (micro: number) => void;

/** The token-level losses over micro-batches `ms`: one pass that trains. */
async function tokenLossPass(
  model: PolicyModel,
  packed: PackResult,
  ms: number[],
  loss: ParsedLossSpec,
  normalizer: number,
  before: BeforeMicro,
  sums: StepSums,
): Promise<void> {
  for (const m of ms) {
    before(m);
    const s = await model.accumulate(packed.microBatches[m]!, loss, normalizer);
    sums.loss += s.loss;
    sums.entropy += s.entropySum;
    sums.kl += s.mismatchKlSum;
    sums.masked += s.maskedTokens;
    sums.lossTokens += s.lossTokens;
  }
}

/** GSPO's first pass over micro-batches `ms`: the learner's token logprobs by micro-batch (the gradient is discarded). */
async function gspoFirstPass(
  model: PolicyModel,
  packed: PackResult,
  ms: number[],
  normalizer: number,
  before: BeforeMicro,
  sums: StepSums,
): Promise<Map<number, Float32Array>> {
  const logp = new Map<number, Float32Array>();
  for (const m of ms) {
    before(m);
    const s = await model.accumulate(packed.microBatches[m]!, { name: "sft" }, normalizer, { tokenLogprobs: true });
    logp.set(m, s.tokenLogprobs!);
    sums.entropy += s.entropySum;
    sums.lossTokens += s.lossTokens;
  }
  model.zeroGrad();
  return logp;
}

/** GSPO's second pass over `ms`: their coefficients, given the whole step's sequence count, then the pass that trains. */
async function gspoSecondPass(
  model: PolicyModel,
  packed: PackResult,
  ms: number[],
  logp: Map<number, Float32Array>,
  spec: GspoSpec,
  normalizer: number,
  sequences: number,
  before: BeforeMicro,
  sums: StepSums,
): Promise<void> {
  const g: GspoSums = { loss: 0, clippedTokens: 0, mismatchKlSum: 0 };
  const coefficients = ms.map((m) => gspoMicroBatch(packed.microBatches[m]!, logp.get(m)!, spec, normalizer, sequences, g));
  for (const [i, m] of ms.entries()) {
    before(m);
    await model.accumulate(secondPass(packed.microBatches[m]!, coefficients[i]!, logp.get(m)!), GSPO_SECOND_PASS_LOSS, normalizer);
  }
  sums.loss += g.loss;
  sums.kl += g.mismatchKlSum;
  sums.masked += g.clippedTokens;
}

const noSums = (): StepSums => ({ loss: 0, entropy: 0, kl: 0, masked: 0, lossTokens: 0 });

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
  const all = packed.microBatches.map((_, m) => m);
  const sums = noSums();
  if (loss.name === "gspo") {
    // First pass: the learner's token logprobs; then the sequence-level coefficients and the pass that trains.
    const logp = await gspoFirstPass(model, packed, all, normalizer, before, sums);
    await gspoSecondPass(model, packed, all, logp, loss, normalizer, gspoSequenceCount(packed.microBatches), before, sums);
  } else await tokenLossPass(model, packed, all, loss, normalizer, before, sums);
  if (!Number.isFinite(sums.loss)) {
    model.zeroGrad(); // the weights and moments are untouched: the step can be retried without these samples
    throw new NonFiniteStepError(`the step's loss is ${sums.loss}: its samples overflow the objective`);
  }
  const stepOpt = { lr: opt.lr, beta1: opt.beta1, beta2: opt.beta2, eps: opt.eps, weightDecay: opt.weightDecay, maxGradNorm: opt.maxGradNorm };
  const r = lora ? lora.stepModel(model, stepOpt) : await model.step(stepOpt);
  // The kernels drop a step with a non-finite gradient (weights, moments and step count untouched).
  if (r.skipped) throw new NonFiniteStepError(`the step's gradient norm is ${r.gradNorm}: its samples overflow the gradient`);
  return stepReport(sums, r, opt.lr, packed.totalTokens, performance.now() - t0);
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

/** What a rank's step needs of its ZeRO-1 optimizer: the full model's (Zero1Optimizer) or the adapters' (Zero1Adapters). */
/** What a rank's step needs of its ZeRO-1 optimizer: the whole model's (Zero1Optimizer) or the adapters' (Zero1Adapters). */
export interface RankOptimizer extends Pick<Zero1Optimizer, "comm" | "rank" | "size"> {
  step(opt: StepOptions): StepResult | Promise<StepResult>;
}

/**
 * One optimizer step of a learner rank (actors.learner.ranks > 1): every rank holds the whole step packed the same way
 * and trains micro-batches m with m % size == rank; the loss is normalised by the whole step's loss tokens, the
 * gradient summed over ranks by the ZeRO-1 step (kernels/zero1.ts; with `lora`, the adapters', kernels/zero1-lora.ts),
 * the statistics all-reduced, so every rank returns the same report. GSPO all-reduces the step's sequence count
 * between its passes, so each rank's coefficients are the ones one process computes for those micro-batches. LoRA
 * dropout's masks are keyed by `step` and the micro-batch's index in the whole step, as on one process.
 *
 * A failure on one rank reaches every rank through the next all-reduce, so none is left blocked in a collective: a
 * failure the input caused (the kernels refused it, a non-finite loss or gradient) throws NonFiniteStepError-like
 * input errors on every rank with the weights and moments untouched (rank 0 sets the batches aside and plans the step
 * again); any other failure throws too, and ends the job.
 */
export async function trainOnRanks(
  model: PolicyModel,
  packed: PackResult,
  loss: ParsedLossSpec,
  opt: OptimizerConfig,
  zero: RankOptimizer,
  lora?: LoraAdapters | null,
  step = 0,
): Promise<StepReport> {
  const t0 = performance.now();
  model.zeroGrad();
  const before = (micro: number) => lora?.beforeMicro(model, step, micro);
  const normalizer = Math.max(1, packed.lossTokens);
  const mine = packed.microBatches.map((_, m) => m).filter((m) => m % zero.size === zero.rank);
  const sums = noSums();
  let pass: () => Promise<void> = () => tokenLossPass(model, packed, mine, loss, normalizer, before, sums);
  if (loss.name === "gspo") {
    let logp = new Map<number, Float32Array>();
    const [sequences] = await reduceOnRanks(zero.comm, model, 1, async () => {
      logp = await gspoFirstPass(model, packed, mine, normalizer, before, sums);
      return [gspoSequenceCount(mine.map((m) => packed.microBatches[m]!))];
    });
    pass = () => gspoSecondPass(model, packed, mine, logp, loss, normalizer, sequences!, before, sums);
  }
  const [lossSum, entropy, kl, masked, lossTokens] = await reduceOnRanks(zero.comm, model, 5, async () => {
    await pass();
    return [sums.loss, sums.entropy, sums.kl, sums.masked, sums.lossTokens];
  });
  if (!Number.isFinite(lossSum!)) {
    model.zeroGrad();
    throw new NonFiniteStepError(`the step's loss is ${lossSum}: its samples overflow the objective`);
  }
  const r = await zero.step({ lr: opt.lr, beta1: opt.beta1, beta2: opt.beta2, eps: opt.eps, weightDecay: opt.weightDecay, maxGradNorm: opt.maxGradNorm });
  if (r.skipped) throw new NonFiniteStepError(`the step's gradient norm is ${r.gradNorm}: its samples overflow the gradient`);
  const total = { loss: lossSum!, entropy: entropy!, kl: kl!, masked: masked!, lossTokens: lossTokens! };
  return stepReport(total, r, opt.lr, packed.totalTokens, performance.now() - t0);
}

/**
 * Runs this rank's part of a step, then sums its `width` values over the ranks together with every rank's failure
 * flags. When any rank failed, every rank throws here alike: an input-caused failure with the gradient zeroed (the
 * step can be planned again), any other as is (the job ends).
 */
async function reduceOnRanks(comm: NativeComm, model: PolicyModel, width: number, work: () => Promise<number[]>): Promise<number[]> {
  let values: number[] = new Array<number>(width).fill(0);
  let failure: unknown;
  try {
    values = await work();
  } catch (e) {
    failure = e;
  }
  const failed = failure !== undefined;
  const buf = Float64Array.from([...values, failed && isInputCaused(failure) ? 1 : 0, failed && !isInputCaused(failure) ? 1 : 0]);
  comm.allReduceSum(buf);
  const [input, other] = [buf[width]!, buf[width + 1]!];
  if (other > 0) throw failed ? failure : new Error(`learner ranks: ${other} other rank(s) failed this step (see their logs)`);
  if (input > 0) {
    model.zeroGrad();
    throw failed ? failure : new NonFiniteStepError("another rank's kernels refused this step's input");
  }
  return Array.from(buf.subarray(0, width));
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
