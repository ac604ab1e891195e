// The evaluator's summaries (KV eval.results) rebuilt from what it published on rs.<run>.eval: one result message
// per version, environment and split, stored before the summary. The sums are the evaluator's own
// (actors/evaluator/held-out.ts): figures over environments weighted by their problem counts, the eval split as the
// headline and any other split under its name. A version recorded as skipped has no messages and is not rebuilt:
// the evaluator comes to it again and says so again.
import type { EvalMessage, HeldOutResult, RunChannels } from "../../streams/index.js";

type EvalResult = Extract<EvalMessage, { kind: "result" }>;
type SplitSummary = NonNullable<HeldOutResult["splits"]>[string];

/** Every version's summary from the result messages on the eval subject (the last message of a version, environment and split wins). */
export async function evalResultsFromStream(channels: RunChannels): Promise<Record<string, HeldOutResult>> {
  const latest = new Map<string, EvalResult>();
  const reader = channels.eval.reader(1);
  try {
    // The first read creates the reader's consumer; then an empty wait means everything stored has been read.
    for (let m = await reader.next(3000); m !== null; m = await reader.next(500)) {
      if ("value" in m && m.value.kind === "result") latest.set(`${m.value.version}\u0000${m.value.split ?? "eval"}\u0000${m.value.env}`, m.value);
    }
  } finally {
    await reader.close();
  }
  const byVersion = new Map<number, EvalResult[]>();
  for (const r of latest.values()) byVersion.set(r.version, [...(byVersion.get(r.version) ?? []), r]);
  return Object.fromEntries([...byVersion].sort(([a], [b]) => a - b).map(([v, rs]) => [String(v), summaryOf(v, rs)]));
}

function summaryOf(version: number, results: EvalResult[]): HeldOutResult {
  const splits = new Map<string, EvalResult[]>();
  for (const r of results) splits.set(r.split ?? "eval", [...(splits.get(r.split ?? "eval") ?? []), r]);
  const headline = splitSummary(splits.get("eval") ?? []);
  const extra = [...splits].filter(([name]) => name !== "eval").map(([name, rs]) => [name, splitSummary(rs)] as const);
  return {
    version,
    ...headline,
    seconds: results.reduce((t, r) => t + r.seconds, 0),
    ...(extra.length ? { splits: Object.fromEntries(extra) } : {}),
  };
}

function splitSummary(results: EvalResult[]): SplitSummary {
  const total = results.reduce((t, r) => t + r.n, 0);
  const n = Math.max(1, total);
  const weighted = (pick: (r: EvalResult) => number) => results.reduce((t, r) => t + pick(r) * r.n, 0) / n;
  const ks = [...new Set(results.flatMap((r) => Object.keys(r.passAtK)))];
  return {
    n: total,
    passAt1: weighted((r) => r.passAt1),
    passAtK: Object.fromEntries(ks.map((k) => [k, weighted((r) => r.passAtK[k] ?? 0)])),
    rewardMean: weighted((r) => r.rewardMean),
    byEnv: Object.fromEntries(results.map((r) => [r.env, { n: r.n, passAt1: r.passAt1 }])),
  };
}
