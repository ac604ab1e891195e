import { passAtK, reportedKs } from "./pass-at-k.js";
import type { EvalRecord } from "./records.js";

export interface EvalSummary {
  env: string;
  examples: number;
  rolloutsPerExample: number;
  samples: number;
  reward: { mean: number; std: number };
  /** Mean of each weighted reward function. */
  components: Record<string, number>;
  /** Mean of each metric (over the samples that report it). */
  metrics: Record<string, number>;
  /** Unbiased pass@k over examples with all their rollouts; a sample passes when reward >= passThreshold. */
  passAtK: Record<string, number>;
  passThreshold: number;
  stopReasons: Record<string, number>;
  truncatedRate: number;
  /** Error messages (function errors, unparseable output, failed rollouts) and how often each occurred. */
  errors: Record<string, number>;
  /** Fraction of samples with at least one error. */
  errorRate: number;
  timing: {
    wallSeconds: number;
    generateMsMean: number;
    envMsMean: number;
    scoreMsMean: number;
    completionTokensMean: number;
    /** Model-sampled tokens per wall-clock second in this session. */
    modelTokensPerSecond: number;
  };
}

const mean = (xs: number[]) => (xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : 0);

export function summarize(
  env: string,
  records: EvalRecord[],
  opts: { rolloutsPerExample: number; passThreshold: number; wallSeconds: number; sessionModelTokens: number },
): EvalSummary {
  const rewards = records.map((r) => r.reward);
  const m = mean(rewards);
  const std = Math.sqrt(mean(rewards.map((x) => (x - m) ** 2)));
  const avgOf = (pick: (r: EvalRecord) => Record<string, number>) => {
    const sums = new Map<string, number[]>();
    for (const r of records) for (const [k, v] of Object.entries(pick(r))) sums.set(k, [...(sums.get(k) ?? []), v]);
    return Object.fromEntries([...sums].sort(([a], [b]) => (a < b ? -1 : 1)).map(([k, v]) => [k, mean(v)]));
  };
  const count = (keys: string[]) => {
    const out: Record<string, number> = {};
    for (const k of keys) out[k] = (out[k] ?? 0) + 1;
    return Object.fromEntries(Object.entries(out).sort(([, a], [, b]) => b - a));
  };

  const byExample = new Map<number, EvalRecord[]>();
  for (const r of records) byExample.set(r.example, [...(byExample.get(r.example) ?? []), r]);
  const groups = [...byExample.values()].filter((g) => g.length === opts.rolloutsPerExample);
  const passes = (r: EvalRecord) => r.reward >= opts.passThreshold - 1e-9;
  const passAt: Record<string, number> = {};
  if (groups.length > 0) {
    for (const k of reportedKs(opts.rolloutsPerExample)) {
      passAt[`pass@${k}`] = mean(groups.map((g) => passAtK(g.length, g.filter(passes).length, k)));
    }
  }

  return {
    env,
    examples: byExample.size,
    rolloutsPerExample: opts.rolloutsPerExample,
    samples: records.length,
    reward: { mean: m, std },
    components: avgOf((r) => r.components),
    metrics: avgOf((r) => r.metrics),
    passAtK: passAt,
    passThreshold: opts.passThreshold,
    stopReasons: count(records.map((r) => r.stopReason)),
    truncatedRate: mean(records.map((r) => (r.isTruncated ? 1 : 0))),
    errors: count(records.flatMap((r) => r.errors.map((e) => (e.length > 120 ? e.slice(0, 117) + "..." : e)))),
    errorRate: mean(records.map((r) => (r.errors.length ? 1 : 0))),
    timing: {
      wallSeconds: opts.wallSeconds,
      generateMsMean: mean(records.map((r) => r.generateMs)),
      envMsMean: mean(records.map((r) => r.envMs)),
      scoreMsMean: mean(records.map((r) => r.scoreMs)),
      completionTokensMean: mean(records.map((r) => r.completionTokens)),
      modelTokensPerSecond: opts.wallSeconds > 0 ? opts.sessionModelTokens / opts.wallSeconds : 0,
    },
  };
}

/** The human-readable report printed at the end of an eval. */
export function formatSummary(s: EvalSummary): string {
  const f = (x: number) => (Number.isInteger(x) ? String(x) : x.toFixed(4));
  const lines = [
    `${s.env}: ${s.examples} examples x ${s.rolloutsPerExample} rollouts = ${s.samples} samples`,
    `reward      mean ${f(s.reward.mean)}  std ${f(s.reward.std)}`,
  ];
  if (Object.keys(s.passAtK).length)
    lines.push(
      `pass@k      ${Object.entries(s.passAtK)
        .map(([k, v]) => `${k} ${f(v)}`)
        .join("  ")}  (reward >= ${s.passThreshold})`,
    );
  for (const [k, v] of Object.entries(s.components)) lines.push(`  reward fn ${k.padEnd(20)} ${f(v)}`);
  for (const [k, v] of Object.entries(s.metrics)) lines.push(`  metric    ${k.padEnd(20)} ${f(v)}`);
  lines.push(
    `stop        ${Object.entries(s.stopReasons)
      .map(([k, v]) => `${k} ${v}`)
      .join("  ")}  (truncated ${(100 * s.truncatedRate).toFixed(1)}%)`,
  );
  const errs = Object.entries(s.errors);
  lines.push(`errors      ${errs.length ? `${(100 * s.errorRate).toFixed(1)}% of samples` : "none"}`);
  for (const [k, v] of errs.slice(0, 10)) lines.push(`  ${String(v).padStart(5)}  ${k}`);
  if (errs.length > 10) lines.push(`  ... ${errs.length - 10} more kinds`);
  const t = s.timing;
  lines.push(
    `timing      wall ${t.wallSeconds.toFixed(1)} s  generate ${t.generateMsMean.toFixed(0)} ms  env ${t.envMsMean.toFixed(0)} ms  score ${t.scoreMsMean.toFixed(0)} ms per sample; ` +
      `${t.completionTokensMean.toFixed(1)} completion tokens/sample; ${t.modelTokensPerSecond.toFixed(1)} model tokens/s`,
  );
  return lines.join("\n");
}
