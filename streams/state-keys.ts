// Every key of the run's state KV bucket with the zod schema of its value. Values are JSON so
// `nats kv get rs-<run>-state policy.version` prints something a person can read; a value that does
// not match its schema is reported with the key's name, never cast through.
import { z } from "zod";
// The pool's records are the algorithm's (rl/difficulty-pool.ts): these schemas check the KV values against them.
import type { PoolCursor, PoolStats } from "../rl/difficulty-pool.js";

const int = z.number().int();

/** The starved-learner refill handshake: the learner says which step waits on how many samples;
 *  the orchestrator tops the pipeline up and answers by writing missing = 0 for that step. */
export const LearnerStarvedSchema = z.object({ step: int.nonnegative(), missing: int.nonnegative() });
export type LearnerStarved = z.infer<typeof LearnerStarvedSchema>;

export const RunEnvironmentSchema = z.object({ key: z.string(), id: z.string(), weight: z.number().positive() });

/** One held-out split's figures for a policy version, over the environments that offer the split. */
export const HeldOutSplitSchema = z.object({
  n: int.nonnegative(),
  passAt1: z.number(),
  passAtK: z.record(z.string(), z.number()).default({}),
  rewardMean: z.number(),
  byEnv: z.record(z.string(), z.object({ n: int.nonnegative(), passAt1: z.number() })),
});

/** The evaluator's summary of one policy version over all environments (per-env detail is on rs.<run>.eval). */
export const HeldOutResultSchema = z.object({
  version: int,
  n: int.nonnegative(),
  /** Greedy decoding. */
  passAt1: z.number(),
  /** Unbiased pass@k from eval.samples sampled completions per problem ("pass@1", "pass@2", ...). */
  passAtK: z.record(z.string(), z.number()).default({}),
  rewardMean: z.number(),
  byEnv: z.record(z.string(), z.object({ n: int.nonnegative(), passAt1: z.number() })),
  seconds: z.number().nonnegative(),
  /** Why the version could not be evaluated (its weights are gone), when it could not. */
  skipped: z.string().optional(),
  /**
   * Held-out splits the environments offer besides eval (e.g. arithmetic's "hard"), each over the environments
   * that have it. The fields above are the eval split's: it follows train's distribution, these do not.
   */
  splits: z.record(z.string(), HeldOutSplitSchema).optional(),
});
export type HeldOutResult = z.infer<typeof HeldOutResultSchema>;

/** What decides the bits of the learner's RL steps, written when RL starts (by each learner life), so
 *  `rollstream replay` can run on the same kernel backend or say before it starts why it cannot. */
export const LearnerBackendSchema = z.object({
  device: z.enum(["cpu", "cuda"]),
  /** Whether sgemm went to a BLAS library (OpenBLAS on the CPU, cuBLAS on CUDA) or to our own kernel. */
  blasDispatch: z.boolean(),
  /** The library loaded, with its version and build ("openblas (libopenblas.so.0) OpenBLAS 0.3.21 ..."), or "none (why)". */
  blas: z.string(),
  /** CPU: how sgemm products were routed, as the dispatcher measured each shape class at its first product
   *  ("nt:2048x256x128:1t=blas,tn:256x128x2048:1t=own"; "off"; "on": every product of at least 2^19 multiply-adds to BLAS, unmeasured;
   *  kernels/cpu/gemm_router.h). Written again when a new class is measured; replay pins it. Absent before measured routing. */
  blasRoutes: z.string().optional(),
  /** CPU: the routing in words, with the measured speed of BLAS relative to our sgemm per class. */
  blasDecision: z.string().optional(),
  /** CPU: our sgemm's instruction set ("+avx512f-sgemm": the AVX-512 micro-kernel); CUDA: the GPU. */
  simd: z.string(),
  /** CUDA: how the model's matmuls run (fp32, tf32, bf16). */
  matmul: z.string().optional(),
  abi: int.optional(),
  /** Kernel threads of the RL steps. */
  threads: int.positive(),
  /** Same bits on any thread count: true of our own kernels (tested), not promised by a CPU BLAS library. */
  threadIndependent: z.boolean(),
  /** The RL step this learner life started at. */
  step: int.nonnegative(),
});

/**
 * Difficulty pools (rl.pool): each example's running pass rate, from the group outcomes on rs.<run>.groups, which the
 * orchestrator alone applies in stream order. `seq` is the next event to apply, so a restarted orchestrator
 * neither loses a group nor counts one twice; the sampler chooses only from what is written here.
 */
export const PoolStatsSchema = z.object({
  seq: int.positive(),
  /** envKey -> exampleIndex -> [groups seen, running pass rate]. */
  envs: z.record(z.string(), z.record(z.string().regex(/^\d+$/), z.tuple([int.positive(), z.number().min(0).max(1)]))),
}) satisfies z.ZodType<PoolStats>;

/**
 * The pool sampler's next position in each environment's dataset order, as it stands before regular task `next`
 * is chosen. Written after task next - 1 was published, so it says that task went out even when
 * orchestrator.next did not get written.
 */
export const PoolCursorSchema = z.object({
  next: int.nonnegative(),
  envs: z.record(z.string(), int.nonnegative()),
}) satisfies z.ZodType<PoolCursor>;

/**
 * Who owns a role of the run (`train`, or a singleton actor) and until when (streams/lease.ts). Taken and renewed
 * with compare-and-set on the key's revision; anyone may take it once `renewedAt + ttlMs` has passed, or at once
 * when `host` and `pidNs` are its own and `pid` is no longer alive there.
 */
export const LeaseSchema = z.object({
  /** "host:pid:instance", unique per process: what a refusal names. */
  holder: z.string().min(1),
  host: z.string().min(1),
  pid: int.positive(),
  /** The holder's pid namespace ("pid:[4026531836]"): a pid is only checked where it means the same process. */
  pidNs: z.string().optional(),
  since: z.iso.datetime(),
  renewedAt: z.iso.datetime(),
  ttlMs: int.positive(),
});
export type Lease = z.infer<typeof LeaseSchema>;

/** The roles with one owner at a time: the `train` that launched the run, and the singleton actors. */
export const LEASE_ROLES = ["train", "learner", "orchestrator", "checkpoint", "evaluator"] as const;
export type LeaseRole = (typeof LEASE_ROLES)[number];

export const StateKeySchemas = {
  /** The newest policy version inference should use (-1 before the first). */
  "policy.version": int.min(-1),
  /** RL optimizer steps the learner has done. */
  "learner.step": int.nonnegative(),
  "run.status": z.enum(["running", "done", "failed"]),
  "run.phase": z.enum(["sft", "rl"]),
  /** Index of the next regular task the orchestrator publishes. */
  "orchestrator.next": int.nonnegative(),
  /** Refill tasks and zero-variance replacements published so far (refill msg-ids and their dataset positions count from here). */
  "orchestrator.refills": int.nonnegative(),
  /** Next sequence of the events stream the orchestrator reads the group outcomes (rs.<run>.groups) from (rl.filter). */
  "orchestrator.filterSeq": int.positive(),
  "learner.starved": LearnerStarvedSchema,
  /** rl.pool: running pass rate per example (the orchestrator writes it). */
  "pool.stats": PoolStatsSchema,
  /** rl.pool: the sampler's dataset positions (the orchestrator writes it). */
  "pool.cursor": PoolCursorSchema,
  "learner.backend": LearnerBackendSchema,
  /** Newest training state step written to disk. */
  "checkpoint.latest": int.min(-1),
  /** The run's environments as the orchestrator resolved them. */
  "run.environments": z.array(RunEnvironmentSchema),
  /** The evaluator's result per evaluated policy version (keys are versions); written by the evaluator alone. */
  "eval.results": z.record(z.string().regex(/^\d+$/), HeldOutResultSchema),
  /** The run's owners (LeaseSchema): `train`, and each singleton actor. */
  "lease.train": LeaseSchema,
  "lease.learner": LeaseSchema,
  "lease.orchestrator": LeaseSchema,
  "lease.checkpoint": LeaseSchema,
  "lease.evaluator": LeaseSchema,
} as const;

export type StateKey = keyof typeof StateKeySchemas;
export type StateValue<K extends StateKey> = z.infer<(typeof StateKeySchemas)[K]>;

/** Key names by role, for code that reads better with names than with strings. */
export const StateKeys = {
  policyVersion: "policy.version",
  learnerStep: "learner.step",
  runStatus: "run.status",
  runPhase: "run.phase",
  orchestratorNext: "orchestrator.next",
  orchestratorRefills: "orchestrator.refills",
  orchestratorFilterSeq: "orchestrator.filterSeq",
  learnerStarved: "learner.starved",
  poolStats: "pool.stats",
  poolCursor: "pool.cursor",
  learnerBackend: "learner.backend",
  checkpointLatest: "checkpoint.latest",
  environments: "run.environments",
  evalResults: "eval.results",
} as const satisfies Record<string, StateKey>;
