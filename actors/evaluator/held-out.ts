// One held-out evaluation of one policy version on every environment of the run: greedy decoding for
// pass@1, and eval.samples sampled completions per problem for pass@k. Everything it saw is returned as
// eval messages (one per completion, one result per environment) plus the version's summary for KV.
import { passAtK, reportedKs } from "../../environments/eval/index.js";
import type { EvalMessage, HeldOutResult } from "../../streams/index.js";
import type { RunConfig } from "../runtime/config.js";
import type { LoadedEnvironment } from "../runtime/environments.js";
import type { PolicyEngine } from "../runtime/policy-engine.js";

type EvalSample = Extract<EvalMessage, { kind: "sample" }>;
type EvalResult = Extract<EvalMessage, { kind: "result" }>;

export interface HeldOutEvaluation {
  samples: EvalSample[];
  results: EvalResult[];
  summary: HeldOutResult;
}

const PASS = 1 - 1e-6;
const mean = (xs: number[]) => (xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : 0);

export async function evaluateVersion(
  engine: PolicyEngine,
  envs: LoadedEnvironment[],
  config: RunConfig,
  version: number,
  signal?: AbortSignal,
): Promise<HeldOutEvaluation> {
  const t0 = Date.now();
  const maxTokens = config.eval.maxTokens ?? config.rl.sampling.maxTokens;
  const greedy = { temperature: 0, topP: 1, topK: 0, maxTokens };
  const sampled = { ...config.rl.sampling, maxTokens };
  const k = config.eval.samples;
  const perEnv = Math.max(1, Math.floor(config.eval.n / envs.length));
  const samples: EvalSample[] = [];
  const results: EvalResult[] = [];
  const byEnv: HeldOutResult["byEnv"] = {};
  const passAtKSums = new Map<string, number>();
  let greedyPasses = 0,
    rewardSum = 0,
    total = 0;
  for (const loaded of envs) {
    const envStart = Date.now();
    const ds = loaded.env.dataset("eval");
    const count = Math.min(perEnv, Number.isFinite(ds.size) ? ds.size : perEnv);
    // Seeds depend on the version and the problem only, so an evaluation repeated after a restart is the same.
    const perProblem = await Promise.all(
      Array.from({ length: count }, async (_, i) => {
        const row = ds.row(i);
        const runs = [{ greedy: true, sampling: greedy, seed: 0 }];
        for (let s = 0; s < k; s++) runs.push({ greedy: false, sampling: sampled, seed: (version * 1_000_003 + i * 131 + s) >>> 0 });
        return Promise.all(
          runs.map(async (r, sampleIndex) => {
            const rollout = await loaded.env.rollout({ model: engine.client(r.seed), sampling: r.sampling, signal }, row);
            const [score] = await loaded.env.scoreGroup([rollout], row, {});
            const sample: EvalSample = {
              kind: "sample",
              run: config.run,
              version,
              env: loaded.id,
              exampleId: row.id,
              sampleIndex,
              greedy: r.greedy,
              messages: rollout.messages,
              reward: score!.reward,
              components: score!.components,
              metrics: score!.metrics,
              errors: score!.errors,
              stopReason: rollout.stopReason,
              completionTokens: rollout.completionIds.length,
            };
            return sample;
          }),
        );
      }),
    );
    const flat = perProblem.flat();
    samples.push(...flat);
    const greedyOnes = perProblem.map((p) => p[0]!);
    const passes = greedyOnes.filter((s) => s.reward >= PASS).length;
    const envPassAtK: Record<string, number> = {};
    if (k > 0) {
      for (const kk of reportedKs(k)) {
        envPassAtK[`pass@${kk}`] = mean(perProblem.map((p) => passAtK(k, p.slice(1).filter((s) => s.reward >= PASS).length, kk)));
        passAtKSums.set(`pass@${kk}`, (passAtKSums.get(`pass@${kk}`) ?? 0) + envPassAtK[`pass@${kk}`]! * count);
      }
    }
    const rewards = greedyOnes.map((s) => s.reward);
    const m = mean(rewards);
    const stopReasons: Record<string, number> = {};
    for (const s of flat) stopReasons[s.stopReason] = (stopReasons[s.stopReason] ?? 0) + 1;
    results.push({
      kind: "result",
      run: config.run,
      version,
      env: loaded.id,
      n: count,
      passAt1: passes / count,
      passAtK: envPassAtK,
      rewardMean: m,
      rewardStd: Math.sqrt(mean(rewards.map((x) => (x - m) ** 2))),
      completionTokensMean: mean(flat.map((s) => s.completionTokens)),
      stopReasons,
      seconds: (Date.now() - envStart) / 1000,
    });
    byEnv[loaded.id] = { n: count, passAt1: passes / count };
    greedyPasses += passes;
    rewardSum += rewards.reduce((a, b) => a + b, 0);
    total += count;
  }
  const summary: HeldOutResult = {
    version,
    n: total,
    passAt1: greedyPasses / total,
    passAtK: Object.fromEntries([...passAtKSums].map(([key, sum]) => [key, sum / total])),
    rewardMean: rewardSum / total,
    byEnv,
    seconds: (Date.now() - t0) / 1000,
  };
  return { samples, results, summary };
}
