// The figures of a training step that replay compares with the run's record (metrics.jsonl, or a
// bundle's recorded.jsonl: the learner's "step" events), and how far apart two sets of them are.
import { existsSync, readFileSync } from "node:fs";
import { MetricsEventSchema } from "../../streams/index.js";
import type { StepReport } from "../../kernels/train-step.js";

/** Compared in this order; the first four are the side-by-side table's columns. */
export const FIGURES = ["loss", "gradNorm", "maskedFraction", "entropy", "mismatchKl"] as const;
export type Figure = (typeof FIGURES)[number];
export type Figures = Partial<Record<Figure, number>>;

export const FIGURE_LABEL: Record<Figure, string> = {
  loss: "loss",
  gradNorm: "grad norm",
  maskedFraction: "masked fraction",
  entropy: "entropy",
  mismatchKl: "mismatch KL",
};

export function figuresOf(r: StepReport): Figures {
  return { loss: r.loss, gradNorm: r.gradNorm, maskedFraction: r.maskedFraction, entropy: r.entropy, mismatchKl: r.mismatchKl };
}

/** The learner's step records by step (the last one wins: a step recomputed after a restore is recorded again). */
export function recordedSteps(jsonl: string): Map<number, { figures: Figures; line: string }> {
  const out = new Map<number, { figures: Figures; line: string }>();
  for (const line of jsonl.split("\n")) {
    if (!line) continue;
    let raw: unknown;
    try {
      raw = JSON.parse(line);
    } catch {
      continue; // a line cut short by a killed `train`
    }
    const r = MetricsEventSchema.safeParse(raw);
    if (!r.success || r.data.actor !== "learner" || r.data.kind !== "step" || r.data.step === undefined) continue;
    const figures: Figures = {};
    for (const f of FIGURES) if (r.data.values[f] !== undefined) figures[f] = r.data.values[f];
    out.set(r.data.step, { figures, line });
  }
  return out;
}

export function readRecordedSteps(file: string): Map<number, { figures: Figures; line: string }> {
  return existsSync(file) ? recordedSteps(readFileSync(file, "utf8")) : new Map();
}

/** |a - b| relative to the larger magnitude: 0 when equal, 1 when one of them is 0 and the other is not. */
export function relativeDifference(a: number, b: number): number {
  if (a === b) return 0;
  return Math.abs(a - b) / Math.max(Math.abs(a), Math.abs(b));
}

export interface Comparison {
  /** Every recorded figure equal to the bit; null when the step has no record. */
  exact: boolean | null;
  maxRelDiff: number | null;
  /** The figure with the largest relative difference, and its absolute difference. */
  figure: Figure | null;
  absDiff: number | null;
}

export function compareFigures(replayed: Figures, recorded: Figures | undefined): Comparison {
  if (!recorded || recorded.loss === undefined) return { exact: null, maxRelDiff: null, figure: null, absDiff: null };
  let max = 0;
  let figure: Figure | null = null;
  let absDiff: number | null = null;
  for (const f of FIGURES) {
    const a = replayed[f];
    const b = recorded[f];
    if (a === undefined || b === undefined) continue;
    const d = relativeDifference(a, b);
    if (d > max) {
      max = d;
      figure = f;
      absDiff = Math.abs(a - b);
    }
  }
  return { exact: max === 0, maxRelDiff: max, figure, absDiff };
}
