// Held-out pass@1 of a policy on the run's environments (eval split, greedy decoding): what the demo
// prints after SFT and after RL.
import type { RunConfig } from "../actors/runtime/config.js";
import { loadRunEnvironments } from "../actors/runtime/environments.js";
import { createPolicyModel, createTokenizer } from "../actors/runtime/model-factory.js";
import { PolicyEngine } from "../actors/runtime/policy-engine.js";
import type { HeldOutResult } from "../streams/index.js";

export type { HeldOutResult };

export async function heldOutEval(config: RunConfig, weights: Uint8Array, version: number, opts: { threads?: number } = {}): Promise<HeldOutResult> {
  const t0 = Date.now();
  const envs = [...(await loadRunEnvironments(config)).values()];
  const model = createPolicyModel(config, { threads: opts.threads });
  model.loadSafetensors(weights);
  const engine = new PolicyEngine(model, createTokenizer(config), version, { maxBatch: 128 });
  const sampling = { temperature: 0, topP: 1, topK: 0, maxTokens: config.eval.maxTokens ?? config.rl.sampling.maxTokens };
  const perEnv = Math.max(1, Math.floor(config.eval.n / envs.length));
  const byEnv: HeldOutResult["byEnv"] = {};
  let passes = 0,
    rewardSum = 0,
    total = 0;
  for (const loaded of envs) {
    const ds = loaded.env.dataset("eval");
    const count = Math.min(perEnv, Number.isFinite(ds.size) ? ds.size : perEnv);
    const client = engine.client(0);
    const scored = await Promise.all(
      Array.from({ length: count }, async (_, i) => {
        const row = ds.row(i);
        const r = await loaded.env.rollout({ model: client, sampling }, row);
        const [s] = await loaded.env.scoreGroup([r], row, {});
        return s!.reward;
      }),
    );
    const p = scored.filter((x) => x >= 1 - 1e-6).length;
    byEnv[loaded.id] = { n: count, passAt1: p / count };
    passes += p;
    rewardSum += scored.reduce((a, b) => a + b, 0);
    total += count;
  }
  model.dispose();
  return { version, n: total, passAt1: passes / total, rewardMean: rewardSum / total, byEnv, seconds: (Date.now() - t0) / 1000 };
}
