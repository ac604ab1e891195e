// AdamW settings and the learning-rate schedule, defined once: the run config embeds this schema, and
// the learner computes each step's rate here and passes it to PolicyModel.step({ lr }).
import { z } from "zod";

export const OptimizerSchema = z.object({
  lr: z.number().positive().default(1e-3),
  minLr: z.number().nonnegative().default(0).describe("floor of the cosine schedule"),
  schedule: z.enum(["constant", "cosine"]).default("constant"),
  warmupSteps: z.number().int().nonnegative().default(0),
  beta1: z.number().min(0).lt(1).default(0.9),
  beta2: z.number().min(0).lt(1).default(0.95),
  eps: z.number().positive().default(1e-8),
  weightDecay: z.number().nonnegative().default(0.0),
  maxGradNorm: z.number().positive().default(1.0),
});
export type OptimizerConfig = z.infer<typeof OptimizerSchema>;

/** The learning rate at an optimizer step (0-based) for a schedule. */
export function learningRate(o: OptimizerConfig, step: number, totalSteps: number): number {
  if (o.warmupSteps > 0 && step < o.warmupSteps) return (o.lr * (step + 1)) / o.warmupSteps;
  if (o.schedule === "constant") return o.lr;
  const span = Math.max(1, totalSteps - o.warmupSteps);
  const t = Math.min(1, Math.max(0, (step - o.warmupSteps) / span));
  return o.minLr + 0.5 * (o.lr - o.minLr) * (1 + Math.cos(Math.PI * t));
}

/** The global-norm clip of a step on the adapters (the kernels' rule: a finite max above 0, scale max / (norm + 1e-6)). */
export function globalNormClip(norm: number, maxNorm: number): { clipped: boolean; gradScale: number } {
  const clipped = maxNorm > 0 && Number.isFinite(maxNorm) && norm > maxNorm;
  return { clipped, gradScale: clipped ? maxNorm / (norm + 1e-6) : 1 };
}
