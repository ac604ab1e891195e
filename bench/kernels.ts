// Kernels benchmark on the demo model's shapes (read from examples/demo.yaml): sgemm GFLOP/s of our packed
// kernel, of OpenBLAS and of the dispatcher (which routes each shape class to whichever it measured faster),
// interleaved in the same run, with dispatch / faster per shape; then train tokens/s (accumulate + step on
// 2048-token packed rows) with measured dispatch, our sgemm only and OpenBLAS unmeasured, and decode tokens/s
// (batch 32). Prints a table; the last line is one JSON object.
import { availableParallelism } from "node:os";
import { fileURLToPath } from "node:url";
import { backendInfo, kernels, PolicyModel, type BlasMode, type GemmImpl } from "../kernels/index.js";
import type { ModelConfig } from "../kernels/model-config.js";
import { dirname, resolve } from "node:path";
import { loadRunConfig } from "../actors/runtime/config.js";
import { modelConfigOf } from "../actors/runtime/model-factory.js";
import { machineBusySeconds } from "./machine-cpu.js";

/** The model of examples/demo.yaml, so the figures describe what the demo trains. */
export const DEMO_CONFIG: ModelConfig = modelConfigOf(loadRunConfig(resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "examples", "demo.yaml")));
/** Sequence length of the packed rows and of decoding: the demo's context. */
const CTX = Math.min(128, DEMO_CONFIG.maxPositionEmbeddings);

interface Shape {
  name: string;
  transA: boolean;
  transB: boolean;
  M: number;
  N: number;
  K: number;
}

// The products one training step runs (N = tokens): forward x W^T, backward dX = dY W and dW = dY^T X.
function demoShapes(tokens: number): Shape[] {
  const c = DEMO_CONFIG;
  const D = c.hiddenSize,
    I = c.intermediateSize,
    V = c.vocabSize;
  const QKV = (c.numHeads + 2 * c.numKvHeads) * (c.hiddenSize / c.numHeads);
  const fwd = (name: string, inD: number, outD: number): Shape[] => [
    { name: `${name} fwd`, transA: false, transB: true, M: tokens, N: outD, K: inD },
    { name: `${name} dX`, transA: false, transB: false, M: tokens, N: inD, K: outD },
    { name: `${name} dW`, transA: true, transB: false, M: outD, N: inD, K: tokens },
  ];
  return [...fwd("qkv", D, QKV), ...fwd("o_proj", D, D), ...fwd("gate_up", D, 2 * I), ...fwd("down", I, D), ...fwd("lm_head", D, V)];
}

function rand(n: number, seed: number): Float32Array {
  const a = new Float32Array(n);
  let s = seed >>> 0;
  for (let i = 0; i < n; i++) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    a[i] = s / 4294967296 - 0.5;
  }
  return a;
}

/**
 * Median seconds per call of each kernel on one shape, timed in interleaved rounds (the order rotating) so that a
 * drift in this shared machine's speed hits every kernel alike. Calls are synchronous: all on one thread (one OpenMP team), as a training
 * step's products are. "auto"'s warm-up call is where the dispatcher measures the shape's class.
 */
function timeGemm(s: Shape, impls: GemmImpl[], threads: number, minMs: number): Partial<Record<GemmImpl, number>> {
  const A = rand(s.M * s.K, 1),
    B = rand(s.K * s.N, 2),
    C = new Float32Array(s.M * s.N);
  kernels.setThreads(threads);
  const args = { transA: s.transA, transB: s.transB, M: s.M, N: s.N, K: s.K, A, B, C };
  for (const impl of impls) kernels.sgemm({ ...args, impl }); // warm-up: packing buffers, BLAS threads
  const times = new Map<GemmImpl, number[]>(impls.map((i) => [i, []]));
  const start = performance.now();
  // Every order of the kernels in turn, so each kernel follows each other one equally often (a call can be slowed by
  // the one before it: cache, a BLAS's threads still spinning). A rotation would not do: it keeps the cyclic order,
  // so with three kernels one of them would follow BLAS two rounds in three.
  const orders = permutations(impls);
  for (let round = 0; round < 400 && (round < 2 * orders.length || performance.now() - start < minMs * impls.length); round++) {
    for (const impl of orders[round % orders.length]!) {
      const t0 = performance.now();
      kernels.sgemm({ ...args, impl });
      times.get(impl)!.push(performance.now() - t0);
    }
  }
  const out: Partial<Record<GemmImpl, number>> = {};
  for (const [impl, t] of times) {
    t.sort((a, b) => a - b);
    out[impl] = t[Math.floor(t.length / 2)]! / 1000;
  }
  return out;
}

function permutations<T>(xs: T[]): T[][] {
  if (xs.length <= 1) return [xs];
  return xs.flatMap((x, i) => permutations([...xs.slice(0, i), ...xs.slice(i + 1)]).map((rest) => [x, ...rest]));
}

/** Measures the share of the machine's CPU that other processes used while `fn` ran: on a shared machine, a table
 *  taken while a neighbour trains says more about the neighbour than about the kernels. */
function othersShare<T>(fn: () => T): { value: T; others: number } {
  const busy0 = machineBusySeconds(),
    ours0 = process.cpuUsage(),
    t0 = performance.now();
  const value = fn();
  const ours = process.cpuUsage(ours0);
  const wall = (performance.now() - t0) / 1000;
  const others = machineBusySeconds() - busy0 - (ours.user + ours.system) / 1e6;
  return { value, others: Math.max(0, others) / (wall * availableParallelism()) };
}

async function trainTokensPerSec(threads: number, seconds: number, cfg: ModelConfig = DEMO_CONFIG): Promise<number> {
  const model = PolicyModel.create(cfg, { seed: 1, threads });
  const T = 2048,
    ctx = CTX;
  const tokens = new Int32Array(T).map((_, i) => (i * 7919) % DEMO_CONFIG.vocabSize);
  const segmentStarts = Int32Array.from({ length: T / ctx }, (_, i) => i * ctx);
  const lossMask = Uint8Array.from(tokens, (_, t) => (t % ctx < ctx / 4 ? 0 : 1)); // a quarter prompt, the rest completion
  const advantages = Float32Array.from(tokens, (_, t) => ((t >> 7) % 2 ? 1 : -1));
  const samplerLogprobs = new Float32Array(T).fill(-5.6);
  const batch = { tokens, segmentStarts, lossMask, advantages, samplerLogprobs };
  const normalizer = lossMask.reduce((a, b) => a + b, 0);
  await model.accumulate(batch, { name: "rl" }, normalizer);
  await model.step({ lr: 1e-4 });
  let n = 0;
  const t0 = performance.now();
  while (n < 2 || performance.now() - t0 < seconds * 1000) {
    await model.accumulate(batch, { name: "rl" }, normalizer);
    await model.step({ lr: 1e-4 });
    n++;
  }
  const dt = (performance.now() - t0) / 1000;
  model.dispose();
  return (n * T) / dt;
}

async function decodeTokensPerSec(threads: number): Promise<number> {
  const model = PolicyModel.create(DEMO_CONFIG, { seed: 1, threads });
  const prompts = Array.from({ length: 32 }, (_, i) => Int32Array.from({ length: 16 + (i % 8) }, (_, j) => (i * 31 + j * 7) % DEMO_CONFIG.vocabSize));
  await model.generate({ prompts: prompts.slice(0, 2), maxNewTokens: 4, seed: 1 });
  const t0 = performance.now();
  const res = await model.generate({ prompts, maxNewTokens: CTX - 24, temperature: 1, seed: 2 });
  const dt = (performance.now() - t0) / 1000;
  model.dispose();
  return res.reduce((a, r) => a + r.tokens.length, 0) / dt;
}

/** The MoE shape: the demo model as Qwen3-MoE with 8 experts, top-2, each half the demo's MLP width. */
export const MOE_SHAPE = { numExperts: 8, numExpertsPerTok: 2 };

/**
 * Train tokens/s of the demo model with 8-expert top-2 MoE MLPs against the dense model of the same active
 * parameters (its MLP width = 2 experts' width), both Qwen3-style (q/k norms), in interleaved windows.
 */
async function moeVsDense(threads: number, seconds: number): Promise<{ moe: number; dense: number }> {
  const base: ModelConfig = { ...DEMO_CONFIG, qkNorm: true, headDim: DEMO_CONFIG.hiddenSize / DEMO_CONFIG.numHeads };
  const im = Math.max(1, Math.floor(DEMO_CONFIG.intermediateSize / MOE_SHAPE.numExpertsPerTok));
  const moe: ModelConfig = {
    ...base,
    moe: { ...MOE_SHAPE, moeIntermediateSize: im, normTopkProb: true, routerAuxLossCoef: 0, decoderSparseStep: 1, mlpOnlyLayers: [] },
  };
  const dense: ModelConfig = { ...base, intermediateSize: im * MOE_SHAPE.numExpertsPerTok };
  const rates = { moe: [] as number[], dense: [] as number[] };
  for (let round = 0; round < 2; round++) {
    for (const [name, cfg] of round % 2
      ? ([
          ["dense", dense],
          ["moe", moe],
        ] as const)
      : ([
          ["moe", moe],
          ["dense", dense],
        ] as const)) {
      rates[name].push(await trainTokensPerSec(threads, seconds / 4, cfg));
    }
  }
  const mean = (a: number[]) => a.reduce((x, y) => x + y, 0) / a.length;
  return { moe: mean(rates.moe), dense: mean(rates.dense) };
}

/** A real chat vocabulary (Qwen2's embedding rows) on a one-layer model, so sampling dominates a decode step. */
const SAMPLING_VOCAB = 151_936;

/**
 * Decode tokens/s at a 152k vocabulary with plain temperature sampling and with top-p 0.9, in the same run.
 * The weights are scaled so the next-token distribution is peaked like a trained model's (logit std ~4)
 * rather than the near-uniform one of a fresh init, where any nucleus is most of the vocabulary.
 */
async function samplingTokensPerSec(threads: number): Promise<{ temperature: number; topP: number }> {
  const cfg = { ...DEMO_CONFIG, vocabSize: SAMPLING_VOCAB, hiddenSize: 64, intermediateSize: 128, numLayers: 1, numHeads: 2, numKvHeads: 1 };
  const model = PolicyModel.create(cfg, { seed: 1, threads });
  const params = model.getParams();
  for (let i = 0; i < params.length; i++) params[i]! *= 5;
  model.setParams(params);
  const prompts = Array.from({ length: 16 }, (_, i) => Int32Array.from([1 + i, 2 + i, 3]));
  const rate = async (topP: number) => {
    const t0 = performance.now();
    const res = await model.generate({ prompts, maxNewTokens: 16, temperature: 1, topP, seed: 7 });
    return res.reduce((a, r) => a + r.tokens.length, 0) / ((performance.now() - t0) / 1000);
  };
  await rate(1);
  await rate(0.9);
  // Interleaved, twice each: this machine's speed drifts.
  const t = [await rate(1), await rate(0.9), await rate(1), await rate(0.9)];
  model.dispose();
  return { temperature: (t[0]! + t[2]!) / 2, topP: (t[1]! + t[3]!) / 2 };
}

export async function runKernelsBench(opts: { threads?: number; tokens?: number; seconds?: number } = {}): Promise<Record<string, number>> {
  const info = backendInfo("cpu");
  const threads = opts.threads ?? info.threads;
  const tokens = opts.tokens ?? 2048;
  const haveBlas = info.blas.startsWith("openblas");
  const minMs = 250;
  // Measured routing from a clean slate (any earlier setting of this process forgotten).
  kernels.setBlasMode("auto");
  let flops = 0,
    tOwn = 0,
    tBlas = 0,
    tAuto = 0,
    tFaster = 0,
    worst = Number.POSITIVE_INFINITY;
  const rows: string[] = [];
  const pad = (s: string | number, n: number) => String(s).padStart(n);
  const gf = (f: number, t: number) => (Number.isFinite(t) ? (f / t / 1e9).toFixed(1) : "-");
  rows.push(
    `${"product".padEnd(14)}${pad("M", 6)}${pad("N", 6)}${pad("K", 6)}${pad("own GF/s", 10)}${pad("blas GF/s", 11)}${pad("dispatch", 10)}` +
      `  ${"class".padEnd(12)}${pad("route", 6)}${pad("disp/faster", 13)}`,
  );
  const shapes = demoShapes(tokens);
  const { value: timed, others } = othersShare(() => shapes.map((s) => timeGemm(s, haveBlas ? ["own", "blas", "auto"] : ["own", "auto"], threads, minMs)));
  kernels.setThreads(0);
  // Routes are read after every class has been measured.
  const routes = new Map(
    (backendInfo("cpu").blasRoutes ?? "")
      .split(",")
      .filter((r) => r.includes("="))
      .map((r) => r.split("=") as [string, string]),
  );
  shapes.forEach((s, i) => {
    const t = timed[i]!;
    const own = t.own ?? Number.NaN,
      auto = t.auto ?? Number.NaN,
      blas = t.blas ?? Number.NaN;
    const f = 2 * s.M * s.N * s.K;
    const faster = haveBlas ? Math.min(own, blas) : own;
    const cls = kernels.gemmClass(s.transA, s.transB, s.M, s.N, s.K, threads);
    flops += f;
    tOwn += own;
    tAuto += auto;
    tBlas += blas;
    tFaster += faster;
    worst = Math.min(worst, faster / auto);
    rows.push(
      `${s.name.padEnd(14)}${pad(s.M, 6)}${pad(s.N, 6)}${pad(s.K, 6)}${pad(gf(f, own), 10)}${pad(gf(f, blas), 11)}${pad(gf(f, auto), 10)}` +
        `  ${(cls || "tiny").padEnd(12)}${pad(routes.get(cls) ?? "own", 6)}${pad((faster / auto).toFixed(2), 13)}`,
    );
  });
  const routing = backendInfo("cpu");
  // The same training step with the measured dispatch, on our own sgemm only, and on OpenBLAS for every product
  // unmeasured (the old rule): windows of a third of the time each, the modes in a different order every round,
  // so a drift in the machine's speed (or the first window's warm-up) does not land on one mode.
  const modes: BlasMode[] = haveBlas ? ["auto", "off", "on"] : ["auto", "off"];
  const trainRates = new Map<BlasMode, number[]>(modes.map((m) => [m, []]));
  const orders = permutations(modes);
  for (let round = 0; round < 3; round++) {
    for (const mode of orders[round % orders.length]!) {
      kernels.setBlasMode(mode);
      try {
        trainRates.get(mode)!.push(await trainTokensPerSec(threads, (opts.seconds ?? 3) / 3));
      } finally {
        kernels.setBlasMode("auto");
      }
    }
  }
  const meanRate = (m: BlasMode) => (trainRates.get(m)?.length ? trainRates.get(m)!.reduce((a, b) => a + b, 0) / trainRates.get(m)!.length : Number.NaN);
  const train = meanRate("auto");
  const trainOwn = meanRate("off");
  const trainBlasOn = haveBlas ? meanRate("on") : Number.NaN;
  const decode = await decodeTokensPerSec(threads);
  const sampling = await samplingTokensPerSec(threads);
  const moe = await moeVsDense(threads, opts.seconds ?? 3);
  const result: Record<string, number> = {
    threads,
    tokens,
    own_gflops: flops / tOwn / 1e9,
    dispatch_gflops: flops / tAuto / 1e9,
    blas_gflops: haveBlas ? flops / tBlas / 1e9 : Number.NaN,
    own_vs_blas: haveBlas ? tBlas / tOwn : Number.NaN,
    dispatch_vs_blas: haveBlas ? tBlas / tAuto : Number.NaN,
    /** The acceptance figure: the dispatcher against the faster of the two on its worst shape (>= 0.95 wanted). */
    dispatch_vs_faster_min: worst,
    dispatch_vs_faster_total: tFaster / tAuto,
    /** Share of the machine's CPU other processes used during the sgemm table (a shared machine's noise). */
    others_cpu_share: others,
    train_tokens_per_s: train,
    train_tokens_per_s_own_sgemm: trainOwn,
    train_tokens_per_s_blas_on: trainBlasOn,
    decode_tokens_per_s_batch32: decode,
    sampling_vocab: SAMPLING_VOCAB,
    sampling_tokens_per_s_temperature: sampling.temperature,
    sampling_tokens_per_s_top_p_0_9: sampling.topP,
    top_p_vs_temperature: sampling.topP / sampling.temperature,
    moe_train_tokens_per_s: moe.moe,
    moe_dense_same_active_train_tokens_per_s: moe.dense,
    moe_vs_dense_same_active: moe.moe / moe.dense,
  };
  for (const r of rows) console.log(r);
  console.log(
    `total: own ${result.own_gflops.toFixed(1)} GF/s, OpenBLAS ${result.blas_gflops.toFixed(1)} GF/s, dispatch ${result.dispatch_gflops.toFixed(1)} GF/s ` +
      `(dispatch/faster: worst shape ${worst.toFixed(2)}x, all shapes ${result.dispatch_vs_faster_total.toFixed(2)}x)`,
  );
  console.log(`machine: other processes used ${(others * 100).toFixed(0)}% of the CPU while the table was timed`);
  console.log(`blas: ${routing.blas}`);
  console.log(`dispatch: ${routing.blasDispatch ?? "-"}`);
  console.log(
    `train: ${train.toFixed(0)} tokens/s with measured dispatch, ${trainOwn.toFixed(0)} on our sgemm only (${(trainOwn / train).toFixed(2)}x), ` +
      `${trainBlasOn.toFixed(0)} with OpenBLAS unmeasured (${(trainBlasOn / train).toFixed(2)}x) ` +
      `(2048-token packed rows of ${2048 / CTX} x ${CTX}, rl loss, accumulate + AdamW step)`,
  );
  console.log(`decode: ${decode.toFixed(0)} tokens/s (batch 32, ${CTX - 24} new tokens each)`);
  console.log(
    `sampling at a ${SAMPLING_VOCAB}-id vocabulary (batch 16, 1-layer model): temperature ${sampling.temperature.toFixed(0)} tokens/s, ` +
      `top-p 0.9 ${sampling.topP.toFixed(0)} tokens/s (${(sampling.topP / sampling.temperature).toFixed(2)}x)`,
  );
  console.log(
    `moe: ${moe.moe.toFixed(0)} train tokens/s with ${MOE_SHAPE.numExperts} experts top-${MOE_SHAPE.numExpertsPerTok}, ` +
      `${moe.dense.toFixed(0)} for the dense model of the same active parameters (${(moe.moe / moe.dense).toFixed(2)}x)`,
  );
  console.log(JSON.stringify(result));
  return result;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const threads = process.argv[2] ? Number(process.argv[2]) : undefined;
  runKernelsBench({ threads }).catch((e) => {
    console.error(e);
    process.exit(1);
  });
}
