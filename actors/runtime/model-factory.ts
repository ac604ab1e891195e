// Builds the policy model and tokenizer a run config describes; the same for learner, inference and eval.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { backendInfo, PolicyModel } from "../../kernels/index.js";
import { fromHfConfig } from "../../kernels/hf-config.js";
import { readHfWeights } from "../../kernels/hf-weights.js";
import { loadTokenizer, type Tokenizer } from "../../kernels/tokenizer.js";
import type { ModelConfig } from "../../kernels/model-config.js";
import type { RolloutLimits, TaskLimits } from "../../streams/index.js";
import type { RunConfig } from "./config.js";
import type { LoadedEnvironment } from "./environments.js";

export function modelConfigOf(config: RunConfig): ModelConfig {
  const m = config.model;
  if (m.path) return fromHfConfig(JSON.parse(readFileSync(join(m.path, "config.json"), "utf8")));
  return {
    vocabSize: m.vocabSize,
    hiddenSize: m.hiddenSize,
    intermediateSize: m.intermediateSize,
    numLayers: m.numLayers,
    numHeads: m.numHeads,
    numKvHeads: m.numKvHeads,
    rmsNormEps: m.rmsNormEps,
    ropeTheta: m.ropeTheta,
    tieWordEmbeddings: m.tieWordEmbeddings,
    maxPositionEmbeddings: m.maxPositionEmbeddings,
    attentionBias: m.attentionBias,
  };
}

const shapes = new WeakMap<RunConfig, ModelConfig>();

/** What a rollout of this run must fit: the model's vocabulary and context, the run's advantage bound. */
export function rolloutLimitsOf(config: RunConfig, maxPolicyVersion: number): RolloutLimits {
  let m = shapes.get(config);
  if (!m) shapes.set(config, (m = modelConfigOf(config))); // an HF config.json is read once, not per message
  return { vocabSize: m.vocabSize, contextTokens: m.maxPositionEmbeddings, maxPolicyVersion, maxAbsAdvantage: config.rl.maxAbsAdvantage };
}

/**
 * What a task of this run must fit (streams/task-limits.ts): the orchestrator fills groupSize and sampling from
 * this config, so they are the limits; a temperature up to 2 (or the config's, if higher) stays plausible for
 * a task published before the config's was lowered.
 */
export function taskLimitsOf(config: RunConfig, envs: ReadonlyMap<string, LoadedEnvironment>): TaskLimits {
  const rl = config.rl;
  return {
    run: config.run,
    groupSize: rl.groupSize,
    maxTokens: rl.sampling.maxTokens,
    maxTemperature: Math.max(2, rl.sampling.temperature),
    vocabSize: rolloutLimitsOf(config, 0).vocabSize,
    steps: rl.steps,
    envs: new Map([...envs].map(([key, e]) => [key, { id: e.id, trainSize: e.env.dataset("train").size }])),
  };
}

export function createTokenizer(config: RunConfig): Tokenizer {
  const t = config.tokenizer;
  if (t.kind === "hf") return loadTokenizer({ kind: "hf", path: t.path ?? config.model.path! }); // the config guarantees one
  return loadTokenizer({ kind: "byte" });
}

/** Random init from `model.seed`, or the checkpoint at `model.path`; `log` hears which kernel backend runs it and why
 *  (with `model.device: auto`, why not CUDA: not built, or no GPU visible). */
export function createPolicyModel(config: RunConfig, opts: { threads?: number; log?: { info(obj: object, msg: string): void } } = {}): PolicyModel {
  const cfg = modelConfigOf(config);
  const tok = createTokenizer(config);
  if (tok.vocabSize > cfg.vocabSize) {
    throw new Error(`model.vocabSize ${cfg.vocabSize} is smaller than the tokenizer's vocabulary (${tok.vocabSize})`);
  }
  // Inference never samples ids past the tokenizer (vocabLimit), but the learner's log-probabilities are
  // over the whole vocabulary: for a checkpoint padded past its tokenizer (Qwen's) the padded rows carry
  // no mass and the two agree; for a fresh model they would carry 1/V each, biasing every importance ratio.
  if (config.tokenizer.kind === "hf" && !config.model.path && cfg.vocabSize !== tok.vocabSize) {
    throw new Error(`model.vocabSize ${cfg.vocabSize} must equal the HF tokenizer's vocabulary (${tok.vocabSize}) for a model trained from scratch`);
  }
  const model = PolicyModel.create(cfg, { seed: config.model.seed, threads: opts.threads ?? config.model.threads, device: config.model.device });
  if (config.model.path) model.loadTensors(readHfWeights(config.model.path));
  if (opts.log) {
    const be = backendInfo(config.model.device);
    opts.log.info(
      { device: be.device, requested: config.model.device, why: be.reason, simd: be.simd, blas: be.blas },
      `kernel backend: ${be.device} (${be.reason})`,
    );
  }
  return model;
}
