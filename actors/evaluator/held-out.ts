// One held-out evaluation of one policy version on every environment of the run: greedy decoding for
// pass@1, and eval.samples sampled completions per problem for pass@k. Everything it saw is returned as
// eval messages (one per completion, one result per environment and split) plus the version's summary for KV.
// The summary's headline is the eval split, which follows train's distribution; a split an environment offers
// besides (arithmetic's "hard") is evaluated the same way and reported under its own name in `splits`.
import { heldOutSplits, type DatasetRow, type ModelEndpoint, type SamplingArgs } from "../../environments/api/index.js";
import { passAtK, reportedKs } from "../../environments/eval/index.js";
import type { EvalMessage, HeldOutResult } from "../../streams/index.js";
import type { RunConfig } from "../runtime/config.js";
import type { LoadedEnvironment } from "../runtime/environments.js";
import type { PolicyEngine } from "../runtime/policy-engine.js";

type EvalSample = Extract<EvalMessage, { kind: "sample" }>;
type EvalResult = Extract<EvalMessage, { kind: "result" }>;
type SplitSummary = NonNullable<HeldOutResult["splits"]>[string];

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
  endpoint?: ModelEndpoint,
): Promise<HeldOutEvaluation> {
  const t0 = Date.now();
  const perEnv = Math.max(1, Math.floor(config.eval.n / envs.length));
  const samples: EvalSample[] = [];
  const results: EvalResult[] = [];
  const bySplit = new Map<string, SplitTotals>();
  for (const loaded of envs) {
    const splits = config.eval.extraSplits ? heldOutSplits(loaded.env) : ["eval"];
    for (const split of splits) {
      const one = await evaluateSplit({ engine, loaded, split, perEnv, config, version, signal, endpoint });
      samples.push(...one.samples);
      results.push(one.result);
      let totals = bySplit.get(split);
      if (!totals) bySplit.set(split, (totals = new SplitTotals()));
      totals.add(loaded.id, one.result, one.passes, one.rewardSum);
    }
  }
  const evalSplit = (bySplit.get("eval") ?? new SplitTotals()).summary();
  const extra = [...bySplit].filter(([name]) => name !== "eval").map(([name, totals]) => [name, totals.summary()] as const);
  const summary: HeldOutResult = {
    version,
    ...evalSplit,
    seconds: (Date.now() - t0) / 1000,
    ...(extra.length ? { splits: Object.fromEntries(extra) } : {}),
  };
  return { samples, results, summary };
}

/** Sums of one split's results over environments, weighted by their problem counts. */
class SplitTotals {
  private n = 0;
  private passes = 0;
  private rewardSum = 0;
  private readonly passAtKSums = new Map<string, number>();
  private readonly byEnv: SplitSummary["byEnv"] = {};

  add(env: string, r: EvalResult, passes: number, rewardSum: number): void {
    this.n += r.n;
    this.passes += passes;
    this.rewardSum += rewardSum;
    for (const [k, v] of Object.entries(r.passAtK)) this.passAtKSums.set(k, (this.passAtKSums.get(k) ?? 0) + v * r.n);
    this.byEnv[env] = { n: r.n, passAt1: r.passAt1 };
  }

  summary(): SplitSummary {
    const n = Math.max(1, this.n);
    return {
      n: this.n,
      passAt1: this.passes / n,
      passAtK: Object.fromEntries([...this.passAtKSums].map(([key, sum]) => [key, sum / n])),
      rewardMean: this.rewardSum / n,
      byEnv: this.byEnv,
    };
  }
}

/** How every problem of one environment's split is evaluated. */
interface SplitRun {
  engine: PolicyEngine;
  loaded: LoadedEnvironment;
  config: RunConfig;
  version: number;
  /** The eval split's messages look as they always did; another split's carry its name. */
  tag: { split?: string };
  greedy: SamplingArgs;
  sampled: SamplingArgs;
  /** Sampled completions per problem (eval.samples), for pass@k. */
  k: number;
  signal?: AbortSignal;
  endpoint?: ModelEndpoint;
}

async function evaluateSplit(o: {
  engine: PolicyEngine;
  loaded: LoadedEnvironment;
  split: string;
  perEnv: number;
  config: RunConfig;
  version: number;
  signal?: AbortSignal;
  endpoint?: ModelEndpoint;
}): Promise<{ samples: EvalSample[]; result: EvalResult; passes: number; rewardSum: number }> {
  const { engine, loaded, split, perEnv, config, version, signal, endpoint } = o;
  const envStart = Date.now();
  const maxTokens = config.eval.maxTokens ?? config.rl.sampling.maxTokens;
  const run: SplitRun = {
    engine,
    loaded,
    config,
    version,
    tag: split === "eval" ? {} : { split },
    greedy: { temperature: 0, topP: 1, topK: 0, maxTokens },
    sampled: { ...config.rl.sampling, maxTokens },
    k: config.eval.samples,
    signal,
    endpoint,
  };
  const ds = loaded.env.dataset(split);
  const count = Math.min(perEnv, Number.isFinite(ds.size) ? ds.size : perEnv);
  const perProblem = await Promise.all(Array.from({ length: count }, (_, i) => evaluateProblem(run, ds.row(i), i)));
  return splitResult(run, perProblem, envStart);
}

/** One problem's completions, the greedy one first (sampleIndex 0), then the k sampled ones. Seeds depend on the
 *  version and the problem only, so an evaluation repeated after a restart is the same. */
async function evaluateProblem(run: SplitRun, row: DatasetRow, i: number): Promise<EvalSample[]> {
  const { config, loaded, version } = run;
  const runs = [{ greedy: true, sampling: run.greedy, seed: 0 }];
  for (let s = 0; s < run.k; s++) runs.push({ greedy: false, sampling: run.sampled, seed: (version * 1_000_003 + i * 131 + s) >>> 0 });
  return Promise.all(
    runs.map(async (r, sampleIndex) => {
      const rollout = await loaded.env.rollout({ model: run.engine.client(r.seed), sampling: r.sampling, signal: run.signal, endpoint: run.endpoint }, row);
      const [score] = await loaded.env.scoreGroup([rollout], row, {});
      const sample: EvalSample = {
        kind: "sample",
        run: config.run,
        version,
        env: loaded.id,
        ...run.tag,
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
}

/** The split's result message (greedy pass@1 and reward, sampled pass@k, stop reasons), and the sums SplitTotals adds. */
function splitResult(
  run: SplitRun,
  perProblem: EvalSample[][],
  envStart: number,
): { samples: EvalSample[]; result: EvalResult; passes: number; rewardSum: number } {
  const { k } = run;
  const count = perProblem.length;
  const flat = perProblem.flat();
  const greedyOnes = perProblem.map((p) => p[0]!);
  const passes = greedyOnes.filter((s) => s.reward >= PASS).length;
  const envPassAtK: Record<string, number> = {};
  if (k > 0) {
    for (const kk of reportedKs(k)) {
      envPassAtK[`pass@${kk}`] = mean(perProblem.map((p) => passAtK(k, p.slice(1).filter((s) => s.reward >= PASS).length, kk)));
    }
  }
  const rewards = greedyOnes.map((s) => s.reward);
  const m = mean(rewards);
  const stopReasons: Record<string, number> = {};
  for (const s of flat) stopReasons[s.stopReason] = (stopReasons[s.stopReason] ?? 0) + 1;
  const result: EvalResult = {
    kind: "result",
    run: run.config.run,
    version: run.version,
    env: run.loaded.id,
    ...run.tag,
    n: count,
    passAt1: passes / count,
    passAtK: envPassAtK,
    rewardMean: m,
    rewardStd: Math.sqrt(mean(rewards.map((x) => (x - m) ** 2))),
    completionTokensMean: mean(flat.map((s) => s.completionTokens)),
    stopReasons,
    seconds: (Date.now() - envStart) / 1000,
  };
  return { samples: flat, result, passes, rewardSum: rewards.reduce((a, b) => a + b, 0) };
}
