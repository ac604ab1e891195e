// `rollstream bench inference`: the inference actor's engine (actors/runtime/policy-engine.ts: continuous batching
// over the kernels' step engine) against the static batching it replaced (bench/static-batcher.ts: model.generate
// over a batch), same model, same process, same requests, on two shapes: the demo's (examples/demo.yaml, with a
// 1024-token context for the workload) and a ~21 M-parameter one.
// - mixed: a workload shaped like the tool and multi-turn environments (mixedTasks): groups of 8 rollouts of one
//   prompt, half with the tool environment's instructions before the question, 1-4 model turns per rollout with
//   environment replies between them, per-task token budgets of 16-64, 8 tasks in flight (the demo's maxInFlight).
//   Both engines give every request the same tokens (same seeds; checked), so the work is identical: tokens/s
//   continuous vs static.
// - prefill: single-turn groups of 8: prompt tokens prefilled with shared prefixes vs what the engine would prefill
//   without them (every completion its whole prompt, as the static path does).
// - multi-turn: one conversation of 6 turns: prompt rows prefilled per turn with KV reuse vs the whole conversation.
// - the demo's own rollouts (2-digit additions, 24 tokens, its 64-token context): what its RL loop asks of inference.
// - weights: new weights mid-generation of 32 sequences: how long until they are in use, in ms and engine steps,
//   for keep, recompute and barrier.
// Last line: one JSON object.
import { availableParallelism } from "node:os";
import { resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { PolicyModel } from "../kernels/index.js";
import type { ModelConfig } from "../kernels/model-config.js";
import { ByteTokenizer } from "../kernels/tokenizer.js";
import { PolicyEngine, type WeightUpdate } from "../actors/runtime/policy-engine.js";
import { DEMO_CONFIG } from "./kernels.js";
import { StaticBatcher } from "./static-batcher.js";
import { demoTasks, GROUP, rng, runTasks, type TaskSpec } from "./inference-tasks.js";
import { rlStepsServeVsLocal, serveVsLocal } from "./inference-serve.js";

const tok = new ByteTokenizer();

/** ~21 M parameters with the byte tokenizer's vocabulary. */
const M21: ModelConfig = {
  vocabSize: 288,
  hiddenSize: 512,
  intermediateSize: 1792,
  numLayers: 6,
  numHeads: 8,
  numKvHeads: 4,
  maxPositionEmbeddings: 1024,
  rmsNormEps: 1e-5,
  ropeTheta: 10000,
  tieWordEmbeddings: true,
  attentionBias: false,
};

const bytes = (r: () => number, n: number) => Array.from({ length: n }, () => 32 + Math.floor(r() * 95));

/** What the tool environment puts before every question (environments/api/tool-protocol.ts), in its shape and size. */
const TOOL_INSTRUCTIONS = [
  "You can call tools. To call one, write:",
  '<tool>{"name": "<tool name>", "args": {<arguments as JSON>}}</tool>',
  "Each result comes back in a tool message. When you have the answer, reply without a tool call.",
  "Tools:",
  '- lookup: Looks up a number for a city. Arguments: {"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}',
  '- calc: Evaluates an arithmetic expression. Arguments: {"type":"object","properties":{"expr":{"type":"string"}},"required":["expr"]}',
].join("\n");

const text = (r: () => number, n: number) => String.fromCharCode(...bytes(r, n));

/**
 * Even tasks are shaped like the tool environment (its instructions, a question, 1-4 model turns with a tool
 * result of 20-60 bytes between them), odd ones like a multi-turn chat (a prompt of 24-160 bytes, 1-3 turns with
 * user replies of 8-40 bytes); token budgets 16-64 per turn. Each rollout of a group has its own turn count.
 */
function mixedTasks(n: number, seed: number): TaskSpec[] {
  const r = rng(seed);
  const reply = (role: "tool" | "user", len: number) => [
    tok.endId,
    ...tok.applyChatTemplate([{ role, content: text(r, len) }]).slice(1),
    tok.specialTokenId("assistant"),
  ];
  return Array.from({ length: n }, (_, index) => {
    const tool = index % 2 === 0;
    const question = tool ? `${TOOL_INSTRUCTIONS}\n\n${text(r, 60 + Math.floor(r() * 80))}` : text(r, 24 + Math.floor(r() * 136));
    return {
      index,
      prompt: tok.applyChatTemplate([{ role: "user", content: question }], { addGenerationPrompt: true }),
      args: { temperature: 1, topP: 1, topK: 0, maxTokens: [16, 32, 48, 64][Math.floor(r() * 4)]! },
      replies: Array.from({ length: GROUP }, () =>
        Array.from({ length: Math.floor(r() * (tool ? 4 : 3)) }, () =>
          tool ? reply("tool", 20 + Math.floor(r() * 40)) : reply("user", 8 + Math.floor(r() * 32)),
        ),
      ),
    };
  });
}

/** Single-turn groups on distinct prompts of 100-400 bytes: what sharing within a group saves, alone. */
function groupTasks(n: number, seed: number): TaskSpec[] {
  const r = rng(seed);
  return Array.from({ length: n }, (_, index) => ({
    index,
    prompt: tok.applyChatTemplate([{ role: "user", content: text(r, 100 + Math.floor(r() * 300)) }], { addGenerationPrompt: true }),
    args: { temperature: 1, topP: 1, topK: 0, maxTokens: 32 },
    replies: Array.from({ length: GROUP }, () => []),
  }));
}

/**
 * Static and continuous in alternating order, `rounds` times each (this machine is shared and its speed drifts: the
 * best time of each is compared). Every run gives every rollout the same tokens (checked).
 */
async function mixed(model: PolicyModel, tasks: TaskSpec[], rounds: number) {
  const times = { static: [] as number[], continuous: [] as number[] };
  let generated = 0;
  let staticPrefill = 0;
  let stats = null as ReturnType<PolicyEngine["engineStats"]>;
  let reference: string[] | null = null;
  for (let r = 0; r < rounds; r++) {
    for (const kind of r % 2 === 0 ? (["static", "continuous"] as const) : (["continuous", "static"] as const)) {
      const batcher = new StaticBatcher(model, tok);
      const engine = new PolicyEngine(model, tok, 0);
      const out = await runTasks(tasks, (b) => (kind === "static" ? batcher.client(b) : engine.client(b)));
      reference ??= out.outputs;
      if (out.outputs.some((o, i) => o !== reference![i])) throw new Error(`the ${kind} engine's tokens differ from the first run's for the same seeds`);
      times[kind].push(out.seconds);
      generated = out.generated;
      if (kind === "static") staticPrefill = batcher.promptTokens;
      else stats = engine.engineStats();
      await engine.dispose();
    }
  }
  const s = Math.min(...times.static);
  const c = Math.min(...times.continuous);
  return {
    generated,
    staticTokensPerSec: generated / s,
    continuousTokensPerSec: generated / c,
    times,
    staticPrefill,
    continuousPrefill: stats!.prefillRows,
    preemptions: stats!.preemptions,
  };
}

async function groupPrefill(model: PolicyModel, n: number) {
  const tasks = groupTasks(n, 77);
  const engine = new PolicyEngine(model, tok, 0);
  await runTasks(tasks, (b) => engine.client(b));
  const st = engine.engineStats()!;
  await engine.dispose();
  return { promptTokens: st.promptTokens, prefillRows: st.prefillRows };
}

async function multiTurn(model: PolicyModel) {
  const engine = new PolicyEngine(model, tok, 0);
  const client = engine.client(5);
  const r = rng(9);
  const args = { temperature: 1, topP: 1, topK: 0, maxTokens: 32 };
  let convo = tok.applyChatTemplate([{ role: "user", content: String.fromCharCode(...bytes(r, 120)) }], { addGenerationPrompt: true });
  const turns: Array<{ prompt: number; prefilled: number }> = [];
  for (let turn = 0; turn < 6; turn++) {
    const before = engine.engineStats()?.prefillRows ?? 0;
    const out = await client.generate(convo, args);
    turns.push({ prompt: convo.length, prefilled: engine.engineStats()!.prefillRows - before });
    const reply = tok.applyChatTemplate([{ role: "tool", content: String.fromCharCode(...bytes(r, 20)) }]).slice(1);
    convo = [...convo, ...out.tokenIds, tok.endId, ...reply, tok.specialTokenId("assistant")];
  }
  await engine.dispose();
  return turns;
}

async function weightWait(model: PolicyModel, mode: WeightUpdate) {
  const weights = model.toSafetensors();
  let applied: { waitedMs: number; loadMs: number; steps: number } | null = null;
  const engine = new PolicyEngine(model, tok, 0, { weightUpdate: mode, onWeightsApplied: (w) => (applied = w) });
  const tasks = groupTasks(4, 31).map((t) => ({ ...t, args: { ...t.args, maxTokens: 64 } }));
  const t0 = performance.now();
  let finished = false;
  const run = runTasks(tasks, (b) => engine.client(b)).finally(() => (finished = true));
  // Mid-generation: once the 32 sequences have sampled about 16 tokens each.
  while (engine.generatedTokens < 32 * 16 && !finished) await new Promise((r) => setImmediate(r));
  const steps0 = engine.engineStats()!.steps;
  engine.swapWeights(1, weights);
  await run;
  const st = engine.engineStats()!;
  const stepMs = (performance.now() - t0) / st.steps;
  await engine.dispose();
  const a = applied as { waitedMs: number; loadMs: number; steps: number } | null;
  if (!a) throw new Error(`weights (${mode}) were never applied`);
  return { waitedMs: a.waitedMs, loadMs: a.loadMs, steps: a.steps, stepMs, stepsAfter: st.steps - steps0 };
}

async function benchShape(name: string, cfg: ModelConfig, tasks: number, rounds: number, threads: number, log: (s: string) => void) {
  const model = PolicyModel.create(cfg, { seed: 1, threads });
  try {
    log(`\n== ${name}: ${(model.numParams / 1e6).toFixed(1)} M parameters (hidden ${cfg.hiddenSize}, ${cfg.numLayers} layers), ${threads} threads`);
    await model.generate({ prompts: [Int32Array.from([1, 2, 3])], maxNewTokens: 4 }); // warm-up
    const m = await mixed(model, mixedTasks(tasks, 1), rounds);
    const speedup = m.continuousTokensPerSec / m.staticTokensPerSec;
    const secs = (t: number[]) => t.map((x) => x.toFixed(2)).join(", ");
    log(`mixed (${tasks} tasks x ${GROUP}, ${m.generated} tokens, identical outputs; best of ${rounds}):`);
    log(`  static     ${m.staticTokensPerSec.toFixed(0).padStart(7)} tok/s  (${secs(m.times.static)} s)  prefill ${m.staticPrefill} tokens`);
    log(
      `  continuous ${m.continuousTokensPerSec.toFixed(0).padStart(7)} tok/s  (${secs(m.times.continuous)} s)  prefill ${m.continuousPrefill} rows  (${m.preemptions} preemptions)`,
    );
    log(`  speedup ${speedup.toFixed(2)}x; prefill ${(m.staticPrefill / m.continuousPrefill).toFixed(2)}x fewer`);
    const g = await groupPrefill(model, Math.min(tasks, 8));
    const groupRatio = g.promptTokens / g.prefillRows;
    log(`groups of ${GROUP}, single turn: ${g.prefillRows} prompt rows prefilled vs ${g.promptTokens} without sharing (${groupRatio.toFixed(2)}x fewer)`);
    const turns = await multiTurn(model);
    const later = turns.slice(1);
    const turnRatio = later.reduce((s, t) => s + t.prompt, 0) / later.reduce((s, t) => s + t.prefilled, 0);
    log(
      `multi-turn, 6 turns: prefilled / prompt per turn ${turns.map((t) => `${t.prefilled}/${t.prompt}`).join("  ")}; turns 2-6: ${turnRatio.toFixed(2)}x fewer`,
    );
    const waits: Record<string, number> = {};
    for (const mode of ["keep", "recompute", "barrier"] as const) {
      const w = await weightWait(model, mode);
      log(
        `weights mid-generation, ${mode.padEnd(9)}: in use after ${w.waitedMs.toFixed(1)} ms (${w.loadMs.toFixed(1)} ms of it loading them) = ${w.steps} step boundary(ies) later (a step: ${w.stepMs.toFixed(1)} ms)`,
      );
      waits[`${name}_wait_${mode}_ms`] = +w.waitedMs.toFixed(2);
      waits[`${name}_load_${mode}_ms`] = +w.loadMs.toFixed(2);
      waits[`${name}_wait_${mode}_steps`] = w.steps;
      waits[`${name}_step_ms_${mode}`] = +w.stepMs.toFixed(2);
    }
    return {
      [`${name}_params_m`]: +(model.numParams / 1e6).toFixed(2),
      [`${name}_static_tok_s`]: +m.staticTokensPerSec.toFixed(1),
      [`${name}_continuous_tok_s`]: +m.continuousTokensPerSec.toFixed(1),
      [`${name}_speedup`]: +speedup.toFixed(3),
      [`${name}_mixed_prefill_ratio`]: +(m.staticPrefill / m.continuousPrefill).toFixed(3),
      [`${name}_group8_prefill_ratio`]: +groupRatio.toFixed(3),
      [`${name}_multiturn_prefill_ratio`]: +turnRatio.toFixed(3),
      ...waits,
    };
  } finally {
    model.dispose();
  }
}

/** The demo's rollouts on the demo's model and context: what its RL loop asks of inference. */
export async function demoRollouts(threads: number, tasks: number, rounds: number, log: (s: string) => void) {
  const model = PolicyModel.create(DEMO_CONFIG, { seed: 1, threads });
  try {
    const m = await mixed(model, demoTasks(tasks, 5), rounds);
    const speedup = m.continuousTokensPerSec / m.staticTokensPerSec;
    const secs = (t: number[]) => t.map((x) => x.toFixed(2)).join(", ");
    log(
      `\n== the demo's rollouts (its model, ${DEMO_CONFIG.maxPositionEmbeddings}-token context; ${tasks} tasks x ${GROUP} additions, 24 tokens; best of ${rounds}):`,
    );
    log(`  static     ${m.staticTokensPerSec.toFixed(0).padStart(7)} tok/s  (${secs(m.times.static)} s)`);
    log(`  continuous ${m.continuousTokensPerSec.toFixed(0).padStart(7)} tok/s  (${secs(m.times.continuous)} s)  speedup ${speedup.toFixed(2)}x`);
    return {
      demo_rollouts_static_tok_s: +m.staticTokensPerSec.toFixed(1),
      demo_rollouts_continuous_tok_s: +m.continuousTokensPerSec.toFixed(1),
      demo_rollouts_speedup: +speedup.toFixed(3),
    };
  } finally {
    model.dispose();
  }
}

export async function runInferenceBench(opts: { threads?: number; quick?: boolean } = {}): Promise<Record<string, number>> {
  const threads = opts.threads ?? availableParallelism();
  const log = (s: string) => console.log(s);
  // The 21 M shape's static runs take most of the time: one task, two rounds.
  const demo = await benchShape("demo", { ...DEMO_CONFIG, maxPositionEmbeddings: 1024 }, opts.quick ? 4 : 12, opts.quick ? 1 : 3, threads, log);
  const m21 = await benchShape("m21", M21, 1, opts.quick ? 1 : 2, threads, log);
  const rollouts = await demoRollouts(threads, opts.quick ? 16 : 48, opts.quick ? 1 : 3, log);
  const serve = { ...(await rlStepsServeVsLocal(opts.quick ? 6 : 12, opts.quick ? 1 : 2, log)), ...(await serveVsLocal(opts.quick ? 1 : 3, log)) };
  const figures = { threads, ...demo, ...rollouts, ...m21, ...serve };
  console.log(JSON.stringify(figures));
  return figures;
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  await runInferenceBench({ quick: process.argv.includes("--quick") });
  process.exit(0);
}
