// LoRA: the adapters' gradient (projected from the merged weights' gradient) equals finite differences of the f64
// reference loss over W0 + scale * B A; steps touch the adapters only (the base and every other tensor keep their
// bits); a training state with adapters resumes exactly; PEFT's files round-trip, and an adapter written here from
// PEFT's documented layout loads to the weights that layout means; bad adapter files are refused by name.
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { PolicyModel } from "../../kernels/index.js";
import { LoraAdapters, LoraSchema, loraTargets } from "../../kernels/lora.js";
import { fromPeft, peftCheckpointFiles, toPeft } from "../../kernels/lora-peft.js";
import { decodeTrainStateWithLora, encodeTrainState } from "../../kernels/train-state.js";
import { runTrainStep } from "../../kernels/train-step.js";
import { writeSafetensors } from "../../kernels/safetensors.js";
import { CheckpointDir } from "../../actors/runtime/checkpoint-dir.js";
import { finiteDifferenceGrad, sftLoss, tokenLogprobs } from "../reference/llama-f64.js";
import { f64, randF32, randInts, tinyConfig, weightsOf } from "./helpers.js";

const cfg = tinyConfig({ hiddenSize: 16, intermediateSize: 24, vocabSize: 37, tieWordEmbeddings: false });
const T = 12;
const tokens = randInts(T, 5, cfg.vocabSize);
const segmentStarts = Int32Array.from([0, 7]);
const lossMask = Uint8Array.from(tokens, (_, t) => (t === 0 || t === 7 ? 0 : 1));
const normalizer = 10;
const batch = { tokens, segmentStarts, lossMask };

function setup(settings = { rank: 4, alpha: 8, targetModules: ["q_proj", "v_proj", "down_proj"] as const }) {
  const model = PolicyModel.create(cfg, { seed: 3, threads: 1 });
  const s = LoraSchema.parse({ ...settings, targetModules: [...settings.targetModules] });
  const lora = new LoraAdapters(s, loraTargets(model.tensors(), s), model.getParams());
  // B starts at zero (PEFT's init); give it values so that dA is not zero too.
  for (const t of lora.targets) lora.params.set(randF32(t.out * s.rank, 40 + t.b, 0.3), t.b);
  lora.load(model);
  return { model, lora, base: lora.baseOf(model.getParams()) };
}

test("the adapters' gradient equals finite differences of the f64 reference loss over W0 + scale * B A", async () => {
  const { model, lora, base: baseParams } = setup();
  try {
    await model.accumulate(batch, { name: "sft" }, normalizer);
    const analytic = lora.gradients(model.readRanges("grads", lora.ranges));
    const base = weightsOf(model, baseParams);
    const adapters = f64(lora.params);
    const r = lora.settings.rank;
    const loss = () => {
      const w = new Map(base);
      for (const t of lora.targets) {
        const W = Float64Array.from(base.get(`${t.module}.weight`)!);
        for (let o = 0; o < t.out; o++)
          for (let i = 0; i < t.in; i++) {
            let acc = 0;
            for (let k = 0; k < r; k++) acc += adapters[t.b + o * r + k]! * adapters[t.a + k * t.in + i]!;
            W[o * t.in + i] += lora.scale * acc;
          }
        w.set(`${t.module}.weight`, W);
      }
      return sftLoss({ logprobs: tokenLogprobs(cfg, w, tokens, segmentStarts), lossMask, normalizer });
    };
    // Entries of A and of B in every target.
    const indices = lora.targets.flatMap((t) => [t.a, t.a + 5, t.a + r * t.in - 1, t.b, t.b + 3, t.b + t.out * r - 1]);
    const numeric = finiteDifferenceGrad(loss, adapters, indices, 1e-4);
    indices.forEach((idx, j) => {
      const a = analytic[idx]!;
      const n = numeric[j]!;
      assert.ok(Math.abs(a - n) <= 2e-3 * Math.max(1e-2, Math.abs(n)), `adapter value ${idx}: analytic ${a}, finite difference ${n}`);
    });
    // Positive control: the gradient of the transposed projection is not the gradient.
    assert.notDeepEqual(Array.from(analytic.subarray(0, 8)), Array.from(new Float32Array(8)));
  } finally {
    model.dispose();
  }
});

test("steps update the adapters only: every base weight keeps its bits, the model serves base + scale * B A", async () => {
  const { model, lora } = setup({ rank: 4, alpha: 8, targetModules: ["all-linear"] as never });
  try {
    const before = model.getParams();
    const baseBefore = Float32Array.from(lora.targetBase);
    let first = 0;
    let last = 0;
    for (let i = 0; i < 40; i++) {
      const s = await model.accumulate(batch, { name: "sft" }, normalizer);
      if (i === 0) first = s.loss;
      last = s.loss;
      const r = lora.stepModel(model, { lr: 1e-2, beta1: 0.9, beta2: 0.95, eps: 1e-8, weightDecay: 0, maxGradNorm: 1 });
      assert.equal(r.skipped, false);
      assert.equal(r.step, i + 1);
    }
    // A random model's frozen LM head (init 0.02) bounds its logits: ln(37) = 3.61 cannot fall far, but it falls.
    assert.ok(last < first - 0.15, `LoRA training lowers the loss (${first} -> ${last})`);
    const after = model.getParams();
    assert.deepEqual(after, lora.merged(before), "the model holds the merged weights");
    assert.deepEqual(model.readRanges("params", lora.ranges), lora.mergedTargets(), "readRanges gives the adapted tensors back to back");
    const adapted = new Set(lora.targets.map((t) => `${t.module}.weight`));
    for (const t of model.tensors()) {
      const b = before.subarray(t.offset, t.offset + t.size);
      const a = after.subarray(t.offset, t.offset + t.size);
      if (adapted.has(t.name)) assert.notDeepEqual(a, b, `${t.name} moved through its adapter`);
      else assert.deepEqual(a, b, `${t.name} is frozen`);
    }
    assert.deepEqual(lora.targetBase, baseBefore, "the base copy is untouched");
  } finally {
    model.dispose();
  }
});

test("a training state with adapters resumes exactly: the next step is bit-identical", async () => {
  const a = setup();
  const b = PolicyModel.create(cfg, { seed: 99, threads: 1 });
  try {
    const opt = { lr: 1e-2, beta1: 0.9, beta2: 0.95, eps: 1e-8, weightDecay: 0.01, maxGradNorm: 1 };
    for (let i = 0; i < 3; i++) {
      await a.model.accumulate(batch, { name: "sft" }, normalizer);
      a.lora.stepModel(a.model, opt);
    }
    const counters = { step: 3, sftDone: true, readerSeq: 7, droppedStale: 0, samplesSeen: 24, optimizerStep: 3 };
    const state = encodeTrainState(a.model, counters, a.lora, "tiny-base");
    const restored = decodeTrainStateWithLora(b, state);
    assert.ok(restored.lora);
    assert.equal(restored.counters.optimizerStep, 3);
    assert.deepEqual(b.getParams(), a.model.getParams(), "restored merged");
    for (const m of [a.model, b]) await m.accumulate(batch, { name: "sft" }, normalizer);
    a.lora.stepModel(a.model, opt);
    restored.lora.stepModel(b, opt);
    assert.deepEqual(b.getParams(), a.model.getParams(), "the step after resuming");
    assert.deepEqual(restored.lora.m, a.lora.m);
    // Without adapters the state is the full one (moments of every weight), as before.
    const full = decodeTrainStateWithLora(b, encodeTrainState(a.model, counters));
    assert.equal(full.lora, null);
  } finally {
    a.model.dispose();
    b.dispose();
  }
});

test("PEFT: our export loads back; an adapter in PEFT's documented layout loads to W0 + alpha / r * B A", () => {
  const { model, lora, base } = setup();
  try {
    const files = toPeft(lora, "tiny-base");
    const config = JSON.parse(files.config);
    assert.equal(config.peft_type, "LORA");
    assert.equal(config.r, 4);
    assert.equal(config.lora_alpha, 8);
    assert.deepEqual(config.target_modules, ["q_proj", "v_proj", "down_proj"]);
    const back = fromPeft(files.config, files.weights, { tensors: model.tensors(), base });
    assert.deepEqual(back.params, lora.params);
    assert.deepEqual(back.mergedTargets(), lora.mergedTargets());

    // Written here from PEFT's layout: keys base_model.model.<module>.lora_A.weight [r, in] / lora_B.weight [out, r].
    const r = 2;
    const q = model.tensors().find((t) => t.name === "model.layers.1.self_attn.q_proj.weight")!;
    const [out, inDim] = q.shape as [number, number];
    const tensors = [0, 1].flatMap((layer) => [
      { name: `base_model.model.model.layers.${layer}.self_attn.q_proj.lora_A.weight`, shape: [r, inDim], data: randF32(r * inDim, 7 + layer, 0.2) },
      { name: `base_model.model.model.layers.${layer}.self_attn.q_proj.lora_B.weight`, shape: [out, r], data: randF32(out * r, 9 + layer, 0.2) },
    ]);
    const peftJson = JSON.stringify({
      peft_type: "LORA",
      task_type: "CAUSAL_LM",
      r,
      lora_alpha: 6,
      lora_dropout: 0.05,
      target_modules: ["q_proj"],
      bias: "none",
      use_rslora: false,
    });
    const loaded = fromPeft(peftJson, writeSafetensors(tensors, { format: "pt" }), { tensors: model.tensors(), base });
    const merged = loaded.merged(base);
    const [A, B] = [tensors[2]!.data, tensors[3]!.data];
    for (const [o, i] of [
      [0, 0],
      [out - 1, inDim - 1],
      [3, 5],
    ] as const) {
      let acc = 0;
      for (let k = 0; k < r; k++) acc += B[o * r + k]! * A[k * inDim + i]!;
      const want = base[q.offset + o * inDim + i]! + (6 / r) * acc;
      assert.ok(Math.abs(merged[q.offset + o * inDim + i]! - want) < 1e-6, `q_proj[${o}, ${i}] of layer 1`);
    }
    assert.throws(() => fromPeft(JSON.stringify({ ...JSON.parse(peftJson), use_dora: true }), files.weights, { tensors: model.tensors(), base }), /DoRA/);
    assert.throws(
      () => fromPeft(peftJson, writeSafetensors(tensors.slice(1), {}), { tensors: model.tensors(), base }),
      /layers\.0\.self_attn\.q_proj\.lora_A\.weight is missing/,
    );
    const wrong = tensors.map((t, i) => (i === 0 ? { ...t, shape: [inDim, r] } : t));
    assert.throws(() => fromPeft(peftJson, writeSafetensors(wrong, {}), { tensors: model.tensors(), base }), /has shape/);
  } finally {
    model.dispose();
  }
});

test("a checkpoint of a LoRA run (as the checkpoint actor writes it) holds its adapters in PEFT's format under adapter/", () => {
  const { model, lora, base } = setup();
  const dir = mkdtempSync(join(tmpdir(), "rs-lora-ckpt-"));
  try {
    const counters = { step: 1, sftDone: true, readerSeq: 1, droppedStale: 0, samplesSeen: 0, optimizerStep: 0 };
    const ckpt = new CheckpointDir(dir, "lora-run");
    const state = encodeTrainState(model, counters, lora, "/models/base");
    ckpt.write(1, state, peftCheckpointFiles(state));
    const folder = join(dir, "step-00000001", "adapter");
    const cfgJson = readFileSync(join(folder, "adapter_config.json"), "utf8");
    assert.equal(JSON.parse(cfgJson).base_model_name_or_path, "/models/base");
    const back = fromPeft(cfgJson, readFileSync(join(folder, "adapter_model.safetensors")), { tensors: model.tensors(), base });
    assert.deepEqual(back.params, lora.params);
    const full = encodeTrainState(model, counters);
    assert.deepEqual(peftCheckpointFiles(full), []);
    ckpt.write(2, full, peftCheckpointFiles(full));
    assert.throws(() => readFileSync(join(dir, "step-00000002", "adapter", "adapter_config.json")), /ENOENT/, "no adapter/ without LoRA");
  } finally {
    model.dispose();
    rmSync(dir, { recursive: true, force: true });
  }
});

test("readRanges / writeParamRanges move only the ranges given; a range outside the buffer is refused, naming it", () => {
  const model = PolicyModel.create(cfg, { seed: 5, threads: 1 });
  try {
    const before = model.getParams();
    const ranges = { offsets: Float64Array.of(10, 3), sizes: Float64Array.of(4, 2), total: 6 };
    assert.deepEqual(model.readRanges("params", ranges), Float32Array.of(...before.subarray(10, 14), ...before.subarray(3, 5)));
    model.writeParamRanges(ranges, Float32Array.of(1, 2, 3, 4, 5, 6));
    const want = Float32Array.from(before);
    want.set([1, 2, 3, 4], 10);
    want.set([5, 6], 3);
    assert.deepEqual(model.getParams(), want, "those values land there, every other value keeps its bits");
    const n = model.numParams;
    assert.throws(
      () => model.writeParamRanges({ offsets: Float64Array.of(n - 1), sizes: Float64Array.of(2), total: 2 }, new Float32Array(2)),
      /range 0 \[\d+, \+2\) is outside the buffer/,
    );
    assert.throws(() => model.writeParamRanges(ranges, new Float32Array(5)), /values/);
  } finally {
    model.dispose();
  }
});

test("SFT with adapters (model.lora.sft): only the adapters learn and the SFT loss falls; RL then starts fresh moments on them", async () => {
  const { model, lora } = setup({ rank: 4, alpha: 8, targetModules: ["all-linear"] as never });
  const full = PolicyModel.create(cfg, { seed: 3, threads: 1 });
  try {
    const samples = [0, 1, 2].map((i) => ({
      promptIds: randInts(4, 80 + i, cfg.vocabSize),
      completionIds: randInts(6, 90 + i, cfg.vocabSize),
      completionMask: new Uint8Array(6).fill(1),
      samplerLogprobs: new Float32Array(6),
      advantage: 0,
    }));
    const opt = { lr: 1e-2, beta1: 0.9, beta2: 0.95, eps: 1e-8, weightDecay: 0, maxGradNorm: 1, schedule: "constant", warmupSteps: 0, minLr: 0 } as never;
    const pack = { microBatchTokens: 4096, sharePrefix: false };
    const before = model.getParams();
    const losses: number[] = [];
    for (let s = 0; s < 30; s++) losses.push((await runTrainStep(model, samples, { name: "sft" }, opt, s, 30, pack, lora)).loss);
    assert.ok(losses.at(-1)! < losses[0]! - 0.15, `the SFT loss falls through the adapters (${losses[0]} -> ${losses.at(-1)})`);
    assert.equal(lora.step, 30);
    const after = model.getParams();
    assert.deepEqual(after, lora.merged(before), "base + scale * B A, every other weight with its bits");
    // Positive control: the same SFT without adapters moves the weights LoRA leaves frozen (embedding, norms).
    full.setParams(before);
    await runTrainStep(full, samples, { name: "sft" }, opt, 0, 30, pack, null);
    const emb = full.tensors().find((t) => t.name === "model.embed_tokens.weight")!;
    assert.notDeepEqual(full.getParams().subarray(emb.offset, emb.offset + emb.size), before.subarray(emb.offset, emb.offset + emb.size));
    // RL after SFT: fresh moments and step count, the adapters SFT trained kept.
    const adapters = Float32Array.from(lora.params);
    lora.resetOptimizer();
    assert.equal(lora.step, 0);
    assert.ok(lora.m.every((x) => x === 0) && lora.v.every((x) => x === 0));
    assert.deepEqual(lora.params, adapters);
  } finally {
    model.dispose();
    full.dispose();
  }
});
