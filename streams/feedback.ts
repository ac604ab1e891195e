// The loop's feedback, typed: what flows back upstream to steer the run. Reward publishes one GroupOutcome per
// scored or left-out group on rs.<run>.groups (the orchestrator's refills, difficulty pools and pace deadlines
// read only these); the learner publishes one StepRecord per RL step on rs.<run>.steps (its own restart,
// `replay`, `bench`, the dashboard and runs/<run>/steps.jsonl read only these); `replay` keeps one
// ReplayRecord per replayed step on rs.<run>.replays. Metrics events (rs.<run>.metrics.*) are for people and
// Prometheus: nothing decides anything from them. A field renamed here breaks the build of every reader.
import { z } from "zod";

const int = z.number().int();
const nonNegInt = int.nonnegative();
const finite = z.number().finite();

/** What the reward actor did with a group: trained on, left out by the zero-variance filter, or trained on with zero advantage past the refill cap. */
export const GROUP_OUTCOMES = ["scored", "filtered", "capHit"] as const;

export const GroupOutcomeSchema = z
  .object({
    run: z.string(),
    taskId: z.string().min(1),
    /** Key of the environment in the run config; env is its resolved name@version. */
    envKey: z.string().min(1),
    env: z.string(),
    /** The RL step the task was dispatched for. */
    step: nonNegInt,
    exampleIndex: nonNegInt,
    /** 0 for a task of the dataset's order, r for the r-th replacement of a left-out group. */
    round: nonNegInt,
    outcome: z.enum(GROUP_OUTCOMES),
    /** The rubric's reward of each rollout, in group order (non-finite rewards as 0, as trained). */
    rewards: z.array(finite).min(1),
    /** Share of rollouts with reward >= 1 (what the difficulty pools keep per example). */
    passRate: z.number().min(0).max(1),
    /** Rows published on rollouts.scored (0 when filtered). */
    rows: nonNegInt,
    /** Rollouts longer than the context, left out and dead-lettered. */
    overlong: nonNegInt,
    policyVersionMin: int,
    policyVersionMax: int,
    scoreMs: z.number().nonnegative(),
  })
  .refine((g) => g.policyVersionMin <= g.policyVersionMax, { message: "policyVersionMin must not exceed policyVersionMax" });
export type GroupOutcome = z.infer<typeof GroupOutcomeSchema>;

/** One (outcome, environment, length quarter) cell of a step's staleness tally. */
export const StalenessCellSchema = z.object({
  outcome: z.enum(["trained", "delayed", "droppedStale"]),
  env: z.string(),
  length: z.enum(["q1", "q2", "q3", "q4"]),
  count: int.positive(),
});

export const StepRecordSchema = z.object({
  run: z.string(),
  /** The policy version this step produced (steps are counted from 1). */
  step: int.positive(),
  /** Total RL steps of the run. */
  steps: int.positive(),
  time: z.number(),
  staleness: z.enum(["drop", "pace"]),
  /** The rollouts.scored stream sequences the step trained on, in the order read: a restored learner and replay follow them. */
  seqs: z.array(int.positive()),
  /** Rows trained, trained late (staleness > 0) and dropped as past maxOffPolicySteps. */
  rows: z.object({ trained: nonNegInt, delayed: nonNegInt, droppedStale: nonNegInt }),
  droppedStaleTotal: nonNegInt,
  /** pace: rows read and held for a later step. */
  heldRows: nonNegInt.optional(),
  cells: z.array(StalenessCellSchema),
  stalenessMean: finite,
  stalenessMax: finite,
  loss: finite,
  gradNorm: finite,
  entropy: finite,
  mismatchKl: finite,
  maskedFraction: finite,
  lr: finite,
  tokens: nonNegInt,
  lossTokens: nonNegInt,
  tokensPerSec: finite,
  rewardMean: finite,
  passRate: finite,
  timings: z.object({ waitMs: finite, trainMs: finite, publishMs: finite }),
  /** The kernel device the step ran on ("cpu", "cuda"); learner.backend in KV has the detail. */
  backend: z.string(),
});
export type StepRecord = z.infer<typeof StepRecordSchema>;

/** The figures replay compares, recorded and replayed. */
export const StepFiguresSchema = z.object({
  loss: finite.optional(),
  gradNorm: finite.optional(),
  maskedFraction: finite.optional(),
  entropy: finite.optional(),
  mismatchKl: finite.optional(),
});

/** One replayed step, kept with the run so the dashboard shows what replays found. */
export const ReplayRecordSchema = z.object({
  run: z.string(),
  /** One session per `replay` invocation (its start time). */
  session: z.string(),
  /** The --set settings, "" for a replay as recorded. */
  setting: z.string(),
  step: int.positive(),
  time: z.number(),
  samples: nonNegInt,
  leftOut: nonNegInt,
  replayed: StepFiguresSchema,
  recorded: StepFiguresSchema.nullable(),
  /** Every recorded figure bit-exact; null without a record. */
  exact: z.boolean().nullable(),
  maxRelDiff: z.number().nullable(),
  /** The figure furthest apart. */
  figure: z.string().nullable(),
  /** 1 or 0 when the kernel backend matched the run's, -1 when unknown. */
  backendMatched: z.number().int().min(-1).max(1),
});
export type ReplayRecord = z.infer<typeof ReplayRecordSchema>;

/** A step record with every figure set from `figures` (0 elsewhere): for benchmarks and tests that store steps. */
export function stepRecordOf(run: string, step: number, steps: number, figures: Partial<StepRecord> = {}): StepRecord {
  return StepRecordSchema.parse({
    run,
    step,
    steps,
    time: Date.now(),
    staleness: "drop",
    seqs: [],
    rows: { trained: 0, delayed: 0, droppedStale: 0 },
    droppedStaleTotal: 0,
    cells: [],
    stalenessMean: 0,
    stalenessMax: 0,
    loss: 0,
    gradNorm: 0,
    entropy: 0,
    mismatchKl: 0,
    maskedFraction: 0,
    lr: 0,
    tokens: 0,
    lossTokens: 0,
    tokensPerSec: 0,
    rewardMean: 0,
    passRate: 0,
    timings: { waitMs: 0, trainMs: 0, publishMs: 0 },
    backend: "cpu",
    ...figures,
  });
}
