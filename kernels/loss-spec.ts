// THE loss schema: the named losses the learner can train with, one name and one default per parameter
// (DESIGN.md section 4). The run config embeds it as rl.loss; the kernels take its parsed form flattened by
// toNativeLossSpec. The per-token math of each loss is kernels/shared/loss_token.h. Every loss sums over
// the kept loss tokens and divides by the caller's normalizer (the loss tokens of the whole optimizer
// batch), so micro-batches add up.
//
// With d = logp - samplerLogp and ratio = exp(d):
//   rl        loss = -ratio * A (+ klCoef * k3); tokens whose ratio is outside [maskLow, maskHigh]
//             (default [0.125, 8]) are masked: no gradient, counted in maskedTokens.
//   sft       loss = -logp (cross-entropy on the mask tokens; advantages and sampler logprobs unused).
//   ppo_clip  loss = -min(ratio * A, clip(ratio, 1 - clipEps, 1 + clipEpsHigh) * A) (+ klCoef * k3);
//             clipEps 0.2, clipEpsHigh = clipEps; ratio masking is off by default ([0, Infinity]).
//   dppo      DPPO-binary TV (PRIME-RL's default): with p = exp(logp), q = exp(samplerLogp), a token is masked
//             (no policy gradient, counted) when A > 0 and p - q > probDiffHigh, or A <= 0 and q - p > probDiffLow
//             (0.2 each): a trust region on how far the token's probability moved, in the direction the
//             advantage pushes; loss = -ratio * A (unmasked) + klTau * d^2 (every token; klTau 1e-3).
//   ipo       the same with a symmetric region: masked when |p - q| > threshold (0.1); + klTau * d^2.
//   gspo      the sequence's ratio s = exp(mean d over its loss tokens), loss = -mean over sequences of
//             min(s * A, clip(s, 1 - clipEps, 1 + clipEpsHigh) * A) (clipEps 3e-4, clipEpsHigh 4e-4); computed
//             in two passes over the micro-batches (kernels/gspo.ts), not by one kernel.
//   k3 = exp(d) - d - 1 >= 0 estimates KL(sampler || learner) from the sampled tokens; its gradient is
//   klCoef * (ratio - 1). It is also reported (summed over all loss tokens) as mismatchKlSum.
//
// Adding a loss: a kind in kernels.h and its case in shared/loss_token.h, an entry in LOSS_KIND and a
// schema in the union below (parameters from NativeParams only), and a test.
import { z } from "zod";
import type { NativeLossSpec } from "./native.js";

/** The kind integers of kernels.h `rs_loss_kind` (the one TypeScript copy). */
export const LOSS_KIND = { rl: 0, sft: 1, ppo_clip: 2, dppo: 3, ipo: 4 } as const;

const maskLow = (d: number) => z.number().finite().nonnegative().default(d).describe("tokens whose importance ratio is below this are masked");
// YAML has no Infinity literal but `.inf` (the yaml package reads it as Infinity); a large number works too.
// (zod's z.number() alone rejects Infinity.)
const maskHigh = (d: number) =>
  z.number().positive().or(z.literal(Infinity)).default(d).describe("tokens whose importance ratio is above this are masked; .inf in YAML = no upper mask");
const klCoef = () => z.number().finite().nonnegative().default(0).describe("weight of the k3 KL penalty against the sampler");

// maskLow < maskHigh, reported on maskLow (the config shows it as rl.loss.maskLow).
function masksOrdered(s: { maskLow: number; maskHigh: number }, ctx: z.RefinementCtx): void {
  if (!(s.maskLow < s.maskHigh)) ctx.addIssue({ code: "custom", path: ["maskLow"], message: `must be below maskHigh (${s.maskHigh})` });
}

const rlSchema = z
  .strictObject({
    name: z.literal("rl").describe("ratio-masked policy gradient (DESIGN.md section 4)"),
    maskLow: maskLow(0.125),
    maskHigh: maskHigh(8),
    klCoef: klCoef(),
  })
  .superRefine(masksOrdered);

const sftSchema = z.strictObject({
  name: z.literal("sft").describe("cross-entropy on the loss tokens"),
});

const ppoClipSchema = z
  .strictObject({
    name: z.literal("ppo_clip").describe("PPO clipped surrogate"),
    clipEps: z.number().min(0).lt(1).default(0.2).describe("ratio clipped below at 1 - clipEps"),
    clipEpsHigh: z.number().finite().nonnegative().optional().describe("ratio clipped above at 1 + clipEpsHigh; default clipEps"),
    maskLow: maskLow(0),
    maskHigh: maskHigh(Infinity),
    klCoef: klCoef(),
  })
  .superRefine(masksOrdered)
  .transform((s) => ({ ...s, clipEpsHigh: s.clipEpsHigh ?? s.clipEps }));

const probDiff = (d: number, what: string) => z.number().finite().nonnegative().default(d).describe(what);
const klTau = () =>
  z.number().finite().nonnegative().default(1e-3).describe("weight of the squared log-ratio term (d^2) that pulls every token toward the sampler");

const dppoSchema = z.strictObject({
  name: z.literal("dppo").describe("DPPO binary TV trust region + squared log-ratio KL (PRIME-RL's default)"),
  probDiffLow: probDiff(0.2, "a token with A <= 0 is masked when its probability fell by more than this"),
  probDiffHigh: probDiff(0.2, "a token with A > 0 is masked when its probability rose by more than this"),
  klTau: klTau(),
});

const ipoSchema = z.strictObject({
  name: z.literal("ipo").describe("symmetric probability trust region |p - q| + squared log-ratio KL"),
  threshold: probDiff(0.1, "a token is masked when its probability moved by more than this, either way"),
  klTau: klTau(),
});

const gspoSchema = z.strictObject({
  name: z.literal("gspo").describe("sequence-level importance ratio, clipped per sequence (GSPO); two passes per micro-batch (kernels/gspo.ts)"),
  clipEps: z.number().min(0).lt(1).default(3e-4).describe("sequence ratio clipped below at 1 - clipEps (sequence ratios stay near 1: the GSPO paper's 3e-4)"),
  clipEpsHigh: z.number().finite().nonnegative().default(4e-4).describe("sequence ratio clipped above at 1 + clipEpsHigh"),
});

const lossUnion = z.discriminatedUnion("name", [rlSchema, sftSchema, ppoClipSchema, dppoSchema, ipoSchema, gspoSchema]);

/** A loss spec: `name` (default "rl") plus that loss's parameters; unknown keys are rejected. */
export const lossSpecSchema = z
  .preprocess((v) => (typeof v === "object" && v !== null && !Array.isArray(v) && !("name" in v) ? { name: "rl", ...v } : v), lossUnion)
  .describe("loss: rl (default), ppo_clip, dppo, ipo, gspo or sft, with that loss's parameters");

/** What a caller may write: parameters left out take the schema's defaults. */
export type LossSpec = z.input<typeof lossUnion>;
/** After parsing: every parameter of the named loss present. */
export type ParsedLossSpec = z.output<typeof lossUnion>;
export type LossName = ParsedLossSpec["name"];

/** Each loss's defaults, read from the schema (for display; the schema applies them itself). */
export const LOSS_DEFAULTS = {
  rl: lossUnion.parse({ name: "rl" }),
  sft: lossUnion.parse({ name: "sft" }),
  ppo_clip: lossUnion.parse({ name: "ppo_clip" }),
  dppo: lossUnion.parse({ name: "dppo" }),
  ipo: lossUnion.parse({ name: "ipo" }),
  gspo: lossUnion.parse({ name: "gspo" }),
} as const;

/** True when the loss reads advantages and sampler logprobs (mirrors loss_uses_policy in loss_token.h). */
export function isPolicyLoss(spec: { name: LossName }): boolean {
  return spec.name !== "sft";
}

/** Parses a loss spec (filling defaults); throws naming the bad field. */
export function parseLossSpec(spec: unknown): ParsedLossSpec {
  const r = lossSpecSchema.safeParse(spec);
  if (!r.success) {
    const issues = r.error.issues.map((i) => `${i.path.length ? i.path.join(".") : "(root)"}: ${i.message}`).join("; ");
    throw new Error(`invalid loss spec ${JSON.stringify(spec)}: ${issues}`);
  }
  return r.data;
}

type NativeParams = Omit<NativeLossSpec, "kind" | "normalizer">;
// A loss leaves out the parameters it does not read; they go to the kernels as these (never read there).
const UNUSED: NativeParams = { maskLow: 0, maskHigh: Infinity, clipEps: 0, clipEpsHigh: 0, klCoef: 0 };

/** Validates a loss spec and the normalizer; returns the flat native form. Throws naming the bad field. */
export function toNativeLossSpec(spec: unknown, normalizer: number): NativeLossSpec {
  const s = parseLossSpec(spec);
  if (typeof normalizer !== "number" || !(normalizer > 0) || !Number.isFinite(normalizer)) {
    throw new Error(`loss normalizer must be a positive finite number (got ${normalizer})`);
  }
  if (s.name === "gspo") throw new Error("the gspo loss is not one kernel call: it runs as two passes (kernels/gspo.ts, trainOnSamples)");
  // dppo and ipo bound a probability difference: the kernels read their bounds from maskLow / maskHigh and
  // their klTau from klCoef (kernels.h documents the per-kind meaning).
  if (s.name === "dppo") return { ...UNUSED, maskLow: s.probDiffLow, maskHigh: s.probDiffHigh, klCoef: s.klTau, kind: LOSS_KIND.dppo, normalizer };
  if (s.name === "ipo") return { ...UNUSED, maskLow: 0, maskHigh: s.threshold, klCoef: s.klTau, kind: LOSS_KIND.ipo, normalizer };
  const { name, ...params } = s;
  return { ...UNUSED, ...(params as Partial<NativeParams>), kind: LOSS_KIND[name], normalizer };
}
