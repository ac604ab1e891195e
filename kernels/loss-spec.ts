// The named losses the learner can train with, their parameters and defaults (DESIGN.md section 4), and
// the flat form the native kernels take. Every loss sums over the kept loss tokens and divides by the
// caller's normalizer (the number of loss tokens in the whole optimizer batch), so micro-batches add up.
//
// With d = logp - samplerLogp and ratio = exp(d):
//   rl        loss = -ratio * A (+ klCoef * k3); tokens whose ratio is outside [maskLow, maskHigh]
//             (default [0.125, 8]) are masked: no gradient, counted in maskedTokens.
//   sft       loss = -logp (cross-entropy on the mask tokens; advantages and sampler logprobs unused).
//   ppo_clip  loss = -min(ratio * A, clip(ratio, 1 - eps, 1 + epsHigh) * A) (+ klCoef * k3); eps 0.2,
//             epsHigh = eps; optional ratio masking (off by default).
//   k3 = exp(d) - d - 1 >= 0 estimates KL(sampler || learner) from the sampled tokens; its gradient is
//   klCoef * (ratio - 1). It is also reported (summed over all loss tokens) as mismatchKlSum.
import { z } from "zod";
import type { NativeLossSpec } from "./native.js";

const nonNeg = z.number().finite().nonnegative();
// Infinity is allowed (and means "no upper mask").
const maskHighSchema = z.number().positive().or(z.literal(Infinity));

const rlSchema = z.strictObject({
  name: z.literal("rl"),
  maskLow: nonNeg.optional(),
  maskHigh: maskHighSchema.optional(),
  klCoef: nonNeg.optional(),
});
const sftSchema = z.strictObject({ name: z.literal("sft") });
const ppoSchema = z.strictObject({
  name: z.literal("ppo_clip"),
  eps: z.number().min(0).lt(1).optional(),
  epsHigh: nonNeg.optional(),
  maskLow: nonNeg.optional(),
  maskHigh: maskHighSchema.optional(),
  klCoef: nonNeg.optional(),
});

export const lossSpecSchema = z.discriminatedUnion("name", [rlSchema, sftSchema, ppoSchema]);
export type LossSpec = z.infer<typeof lossSpecSchema>;
export type LossName = LossSpec["name"];

export const LOSS_DEFAULTS = {
  rl: { maskLow: 0.125, maskHigh: 8, klCoef: 0 },
  ppo_clip: { eps: 0.2, maskLow: 0, maskHigh: Infinity, klCoef: 0 },
} as const;

/** True when the loss reads advantages and sampler logprobs. */
export function isPolicyLoss(spec: LossSpec): boolean {
  return spec.name !== "sft";
}

/** Validates a LossSpec and the normalizer; returns the flat native form. Throws naming the bad field. */
export function toNativeLossSpec(spec: unknown, normalizer: number): NativeLossSpec {
  const r = lossSpecSchema.safeParse(spec);
  if (!r.success) {
    const issues = r.error.issues.map((i) => `${i.path.length ? i.path.join(".") : "(root)"}: ${i.message}`).join("; ");
    throw new Error(`invalid loss spec ${JSON.stringify(spec)}: ${issues}`);
  }
  if (typeof normalizer !== "number" || !(normalizer > 0) || !Number.isFinite(normalizer)) {
    throw new Error(`loss normalizer must be a positive finite number (got ${normalizer})`);
  }
  const s = r.data;
  const base = { kind: 0, maskLow: 0, maskHigh: Infinity, clipEps: 0, clipEpsHigh: 0, klCoef: 0, normalizer };
  let out: NativeLossSpec;
  switch (s.name) {
    case "sft":
      out = { ...base, kind: 1 };
      break;
    case "rl": {
      const d = LOSS_DEFAULTS.rl;
      out = { ...base, kind: 0, maskLow: s.maskLow ?? d.maskLow, maskHigh: s.maskHigh ?? d.maskHigh, klCoef: s.klCoef ?? d.klCoef };
      break;
    }
    case "ppo_clip": {
      const d = LOSS_DEFAULTS.ppo_clip;
      const eps = s.eps ?? d.eps;
      out = {
        ...base,
        kind: 2,
        clipEps: eps,
        clipEpsHigh: s.epsHigh ?? eps,
        maskLow: s.maskLow ?? d.maskLow,
        maskHigh: s.maskHigh ?? d.maskHigh,
        klCoef: s.klCoef ?? d.klCoef,
      };
      break;
    }
  }
  if (!(out.maskHigh > out.maskLow)) throw new Error(`invalid loss spec: maskHigh ${out.maskHigh} must exceed maskLow ${out.maskLow}`);
  return out;
}
