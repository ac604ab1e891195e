// The figures of a training step that replay compares with the run's record (its StepRecords on
// rs.<run>.steps, or a bundle's recorded.jsonl of them), and how far apart two sets of them are.
import { StepRecordSchema, type StepRecord } from "../../streams/index.js";
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

/** A recorded step: its record and the figures replay compares. */
export interface RecordedStep {
  record: StepRecord;
  figures: Figures;
}
export type RecordedSteps = Map<number, RecordedStep>;

/** The recorded steps of a set of step records, by step. */
export function recordedStepsOf(records: Iterable<StepRecord>): RecordedSteps {
  const out: RecordedSteps = new Map();
  for (const record of records) {
    const figures: Figures = {};
    for (const f of FIGURES) figures[f] = record[f];
    out.set(record.step, { record, figures });
  }
  return out;
}

/** Step records kept one JSON object a line (a bundle's recorded.jsonl); the last of a step wins. */
export function parseStepRecords(jsonl: string, where: string): StepRecord[] {
  const out: StepRecord[] = [];
  jsonl.split("\n").forEach((line, i) => {
    if (!line) return;
    const r = StepRecordSchema.safeParse(JSON.parse(line));
    if (!r.success) throw new Error(`${where}:${i + 1}: not a step record (${r.error.issues.map((x) => `${x.path.join(".")}: ${x.message}`).join("; ")})`);
    out.push(r.data);
  });
  return out;
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
