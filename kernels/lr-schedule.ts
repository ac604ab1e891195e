// Learning-rate schedules, computed on the TS side and passed to PolicyModel.step({ lr }) each step.
import { z } from "zod";

export const lrScheduleSchema = z.strictObject({
  kind: z.enum(["constant", "cosine", "linear"]),
  /** Learning rate after warmup. */
  peak: z.number().finite().nonnegative(),
  /** Linear ramp from peak / warmupSteps to peak over the first warmupSteps steps. Default 0. */
  warmupSteps: z.number().int().nonnegative().optional(),
  /** cosine / linear: the step at which the decay reaches minLr (required for them). */
  totalSteps: z.number().int().positive().optional(),
  /** Floor of the decay. Default 0. */
  minLr: z.number().finite().nonnegative().optional(),
});
export type LrSchedule = z.infer<typeof lrScheduleSchema>;

/** The learning rate for 0-based optimizer step `step` (the step about to be taken). */
export function lrAt(schedule: LrSchedule, step: number): number {
  const r = lrScheduleSchema.safeParse(schedule);
  if (!r.success) throw new Error(`invalid LR schedule: ${r.error.issues.map((i) => `${i.path.join(".") || "(root)"}: ${i.message}`).join("; ")}`);
  const s = r.data;
  if (!Number.isInteger(step) || step < 0) throw new RangeError(`lrAt: step must be an integer >= 0 (got ${step})`);
  const warmup = s.warmupSteps ?? 0;
  const minLr = s.minLr ?? 0;
  if (step < warmup) return (s.peak * (step + 1)) / warmup;
  if (s.kind === "constant") return s.peak;
  if (s.totalSteps === undefined) throw new Error(`invalid LR schedule: "${s.kind}" needs totalSteps`);
  if (s.totalSteps <= warmup) throw new Error(`invalid LR schedule: totalSteps ${s.totalSteps} must exceed warmupSteps ${warmup}`);
  const progress = Math.min(1, (step - warmup) / (s.totalSteps - warmup));
  const shape = s.kind === "cosine" ? 0.5 * (1 + Math.cos(Math.PI * progress)) : 1 - progress;
  return minLr + (s.peak - minLr) * shape;
}
