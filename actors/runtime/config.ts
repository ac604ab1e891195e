// The run config: one YAML file, validated with zod. Every field has a documented default, so the
// smallest valid config is `run: name` plus an environment. `rollstream config --defaults` prints it.
import { readFileSync } from "node:fs";
import { parse as parseYaml } from "yaml";
import { closest, distance } from "fastest-levenshtein";
import { z } from "zod";
import { lossSpecSchema } from "../../kernels/loss-spec.js";
import { OptimizerSchema } from "../../kernels/optimizer.js";
import { LoraSchema } from "../../kernels/lora.js";

const int = () => z.number().int();
const pos = () => z.number().int().positive();

export const ModelSectionSchema = z.strictObject({
  /** Architecture of a model trained from scratch (ignored when `path` is set). */
  vocabSize: pos().default(288).describe("vocabulary size; must cover the tokenizer (byte tokenizer: 288)"),
  hiddenSize: pos().default(128),
  intermediateSize: pos().default(384),
  numLayers: pos().default(2),
  numHeads: pos().default(4),
  numKvHeads: pos().default(2),
  rmsNormEps: z.number().positive().default(1e-5),
  ropeTheta: z.number().positive().default(10000),
  tieWordEmbeddings: z.boolean().default(true),
  maxPositionEmbeddings: pos().default(128),
  attentionBias: z.boolean().default(false),
  /** A folder with HF config.json + model.safetensors to start from instead of random weights. */
  path: z.string().optional(),
  seed: int().nonnegative().default(1234).describe("weight init seed"),
  threads: pos().optional().describe("kernel threads; default = CPU cores"),
  device: z.enum(["auto", "cpu", "cuda"]).default("auto"),
  lora: LoraSchema.optional().describe(
    "SFT and RL train low-rank adapters on the frozen model.path weights (lora.sft false: SFT trains every weight, RL trains adapters on what it left): {rank, alpha, dropout, targetModules, rsLora, seed, sft}; the weights broadcast are merged, `rollstream lora export` writes PEFT's format",
  ),
});

export const SamplingConfigSchema = z.strictObject({
  temperature: z.number().nonnegative().default(1.0),
  topP: z.number().gt(0).lte(1).default(1.0),
  topK: int().nonnegative().default(0).describe("0 = off"),
  maxTokens: pos().default(16),
});

/** The remote settings of an environment entry when it gives none. */
export const REMOTE_DEFAULTS = { version: "0.0.0", deadlineMs: 300_000, retries: 2, connectMs: 60_000 } as const;

export const EnvironmentEntrySchema = z
  .strictObject({
    /** name@version-range, resolved from environments/ or node_modules; or a remote one: verifiers:<name>, openenv:<name>. */
    id: z.string().min(1),
    /** Key for this entry (defaults to the env name); tasks record it. */
    key: z.string().optional(),
    args: z.record(z.string(), z.unknown()).default({}),
    weight: z.number().positive().default(1).describe("share of prompts drawn from this environment"),
    server: z
      .string()
      .regex(/^(tcp|ipc):\/\/\S+$/, "a ZeroMQ address, tcp://host:port")
      .optional()
      .describe("verifiers:<name>: the env-server's address"),
    url: z
      .string()
      .regex(/^(wss?|https?):\/\/\S+$/, "ws://host:port or http://host:port")
      .optional()
      .describe("openenv:<name>: the OpenEnv server"),
    tasks: z
      .strictObject({ train: z.string().min(1), eval: z.string().min(1) })
      .optional()
      .describe("verifiers:<name>: JSON-lines files of task data, one task a line (the server holds no data)"),
    // Remote-only settings have no schema default, so a built-in's entry stays as written; REMOTE_DEFAULTS fills them.
    version: z.string().min(1).optional().describe('verifiers:<name>: recorded as name@version (a verifiers server reports none); default "0.0.0"'),
    deadlineMs: pos().optional().describe("remote: one rollout (a run request; an OpenEnv episode) at most this long, then cancelled; default 300000"),
    retries: int().nonnegative().optional().describe("remote: a rollout whose server went away is run again at most this many times; default 2"),
    connectMs: pos().optional().describe("remote: how long to wait for the server's health at start and after it went away; default 60000"),
  })
  .superRefine((e, ctx) => {
    const problem = (path: string, message: string) => ctx.addIssue({ code: "custom", path: [path], message });
    if (e.id.startsWith("verifiers:")) {
      if (!e.server) problem("server", `${e.id} needs server: tcp://host:port (the verifiers env-server)`);
      if (!e.tasks) problem("tasks", `${e.id} needs tasks: {train: file.jsonl, eval: file.jsonl}`);
    } else if (e.id.startsWith("openenv:")) {
      if (!e.url) problem("url", `${e.id} needs url: ws://host:port (the OpenEnv server)`);
    } else if ([e.server, e.url, e.tasks, e.version, e.deadlineMs, e.retries, e.connectMs].some((v) => v !== undefined)) {
      problem(
        "id",
        `server, url, tasks, version, deadlineMs, retries and connectMs are for remote environments (verifiers:<name>, openenv:<name>), not ${e.id}`,
      );
    }
  });

export const SftSchema = z.strictObject({
  steps: pos().default(200),
  batchSize: pos().default(64).describe("sequences per optimizer step"),
  optimizer: OptimizerSchema.default(OptimizerSchema.parse({ lr: 3e-3, schedule: "cosine", warmupSteps: 10 })),
  seed: int().nonnegative().default(7),
});

export const GroupFilterSchema = z.strictObject({
  zeroVariance: z
    .boolean()
    .default(false)
    .describe(
      "leave out groups whose completions' rewards (the rubric's, before advantages) all lie within `tolerance`: their advantage is zero, so they only cost compute; the orchestrator dispatches a replacement for each",
    ),
  tolerance: z.number().nonnegative().default(1e-6).describe("a group whose highest and lowest reward differ by at most this is zero-variance"),
  maxRefillRounds: int()
    .nonnegative()
    .default(3)
    .describe(
      "replacements of replacements at most this deep; a zero-variance group of the last round is trained on with zero advantage (counted as capHit, logged) so a step is never starved",
    ),
});

export const PoolSchema = z.strictObject({
  band: z
    .tuple([z.number().min(0).max(1), z.number().min(0).max(1)])
    .default([0.1, 0.9])
    .describe("examples whose running pass rate lies inside [low, high] are dispatched whenever the sampler meets them; unseen examples count as inside"),
  revisit: z
    .number()
    .min(0)
    .max(1)
    .default(0.1)
    .describe("an example whose pass rate lies outside the band is dispatched with this probability when the sampler meets it, else passed over"),
  decay: z
    .number()
    .gt(0)
    .lte(1)
    .default(0.5)
    .describe("weight of the newest group in an example's running pass rate (1: the last group alone); the first group sets it"),
  quotas: z
    .record(z.string(), int().nonnegative())
    .optional()
    .describe("regular tasks per step from each environment key; must add up to batchSize / groupSize; default: environment weights"),
});

export const RlSchema = z.strictObject({
  steps: pos().default(40),
  batchSize: pos().default(64).describe("samples (completions) per optimizer step"),
  groupSize: pos().default(8).describe("completions per prompt; advantages are relative to the group"),
  maxAsyncLevel: int().nonnegative().default(2).describe("tasks for step n go out only while n - learnerStep <= this"),
  maxOffPolicySteps: int().nonnegative().default(4).describe("samples older than this many policy versions are never trained on (counted)"),
  staleness: z
    .enum(["drop", "pace"])
    .default("drop")
    .describe(
      "drop: the learner reads samples in stream order and drops those past maxOffPolicySteps; pace: the orchestrator dispatches no work whose samples would be past the bound when they can be trained, and the learner trains what it holds oldest first",
    ),
  pool: PoolSchema.optional().describe("difficulty pools: the orchestrator favours examples whose running pass rate lies inside a band (off when absent)"),
  maxAbsAdvantage: z.number().positive().default(100).describe("a row whose |advantage| is larger is dead-lettered, never trained on"),
  advantage: z
    .enum(["mean", "mean_std", "rloo"])
    .default("mean")
    .describe("group-relative advantages: mean (r - group mean), mean_std (also divided by the group std), rloo (r - the mean of the others)"),
  normalizeAdvantage: z.boolean().default(false).describe("true: the same as advantage: mean_std (kept for older configs)"),
  filter: GroupFilterSchema.default(GroupFilterSchema.parse({})),
  lengthPenalty: z
    .strictObject({
      coef: z.number().nonnegative().default(0).describe("reward lost at the token budget (0: off)"),
      buffer: pos().default(4).describe("the penalty ramps linearly over the budget's last this many tokens"),
      maxTokens: pos().optional().describe("the budget; default rl.sampling.maxTokens"),
    })
    .default({ coef: 0, buffer: 4 })
    .describe("overlong shaping (DAPO): completions that reach into the last `buffer` tokens of the budget lose up to `coef` reward"),
  microBatchTokens: pos().default(2048).describe("tokens packed per micro-batch"),
  sampling: SamplingConfigSchema.default(SamplingConfigSchema.parse({})),
  loss: lossSpecSchema.default(lossSpecSchema.parse({ name: "rl" })),
  optimizer: OptimizerSchema.default(OptimizerSchema.parse({ lr: 5e-4 })),
  seed: int().nonnegative().default(11),
});

export const EvalSchema = z.strictObject({
  interval: int().nonnegative().default(0).describe("the evaluator evaluates every N policy versions, plus v0 and the final one (0: only those two)"),
  n: pos().default(200).describe("held-out problems per evaluation, split across the run's environments"),
  samples: int()
    .nonnegative()
    .default(0)
    .describe("sampled completions per problem (at rl.sampling's temperature) for pass@k, besides the greedy one; 0: greedy only"),
  maxTokens: pos().optional().describe("default: rl.sampling.maxTokens"),
  extraSplits: z
    .boolean()
    .default(true)
    .describe("also evaluate the held-out splits an environment offers besides eval (arithmetic's hard), each reported under its own name"),
});

export const CheckpointSchema = z.strictObject({
  interval: pos().default(10).describe("full training state to disk every N learner steps"),
  keepLast: pos().default(3).describe("checkpoints kept on disk"),
  keepVersions: pos().default(4).describe("newest weight versions kept in the object store (and those the evaluator has yet to evaluate)"),
});

export const NatsSchema = z.strictObject({
  url: z.string().optional().describe("use this server; else NATS_URL; else start a local nats-server"),
  replicas: pos().default(1),
  rolloutsMaxBytes: int().default(-1),
  eventsMaxBytes: int()
    .min(2 ** 20)
    .default(2 ** 30)
    .describe(
      "the events stream's cap (weights announcements, steps, groups, metrics, dead letters; oldest dropped); JetStream reserves it on the server's disk when the run starts",
    ),
  taskAckWaitMs: pos()
    .default(60_000)
    .describe("a task (inference) or raw group (reward) held this long without a progress heartbeat is redelivered to another replica"),
});

/**
 * How the inference actor reaches external servers (actors.inference.fleet). Only read when backend is not local.
 * The defaults suit a few servers on one network; every HTTP call has a deadline.
 */
export const FleetSchema = z.strictObject({
  requestDeadlineMs: pos()
    .default(300_000)
    .describe("one generate request that takes longer fails; its server leaves rotation and the request is retried on another"),
  maxInFlightPerServer: pos().default(64).describe("generate requests outstanding on one server at most; more wait in the actor"),
  adaptiveCap: z
    .boolean()
    .default(true)
    .describe(
      "each server's cap follows its /metrics (queue and KV gauges of vLLM, SGLang or rollstream serve): what it runs at once while it queues or its KV is nearly full, up to maxInFlightPerServer while it has room",
    ),
  loadCheckMs: pos().default(2_000).describe("adaptiveCap: how often each server's /metrics is read"),
  updateDeadlineMs: pos().default(600_000).describe("one weight-update call (load, pause, resume) that takes longer fails"),
  updateRetries: int().nonnegative().default(2).describe("a failed weight update of one server is retried this many times; then the server leaves rotation"),
  healthCheckMs: pos().default(5_000).describe("a server out of rotation is health-checked this often; once healthy it gets the current weights and rejoins"),
  vllmPauseMode: z
    .enum(["abort", "wait", "keep"])
    .default("abort")
    .describe(
      "vllm: POST /pause?mode= around a weight update; abort returns partial outputs that the actor resubmits under the new weights; keep needs a server that reports weight_versions spans",
    ),
  vllmWeightsRoute: z
    .string()
    .regex(/^\/[A-Za-z0-9_/.-]*$/, "a path such as /update_weights")
    .default("/update_weights")
    .describe(
      "vllm: full-weight reload route, POST {weight_dir}: not in upstream vLLM; deploy/vllm/serve.py serves it with a worker extension (PRIME-RL's shape), see README",
    ),
  loraBase: z
    .enum(["load", "served"])
    .default("load")
    .describe(
      "model.lora.ship adapter: load, each server loads the frozen base once (a full-weight load: vLLM needs vllmWeightsRoute's extension); served, the servers were started on it (RL from model.path without SFT: `vllm serve <model.path> --enable-lora`) and only adapters are loaded",
    ),
});

export const ActorsSchema = z.strictObject({
  inference: z
    .strictObject({
      replicas: pos().default(1),
      backend: z
        .enum(["local", "rollstream", "sglang", "vllm"])
        .default("local")
        .describe(
          "local: the in-process engine; rollstream, sglang, vllm: a fleet of those servers at `servers` (token ids in and out, weights pushed from weights.exportDir)",
        ),
      servers: z
        .array(z.url({ protocol: /^https?$/ }))
        .default([])
        .describe("base URLs of the inference servers (backend other than local), e.g. http://gpu-1:30000"),
      fleet: FleetSchema.default(FleetSchema.parse({})),
      endpoint: z
        .strictObject({
          host: z.string().default("127.0.0.1").describe("listen address (0.0.0.0 when the env server runs on another host)"),
          port: int().min(0).max(65535).default(0).describe("0: any free port"),
          advertiseHost: z.string().optional().describe("the host the env server reaches this actor at (default: host)"),
          healthCheckMs: pos().default(5_000).describe("how often each remote environment's server is asked for health (heartbeat)"),
        })
        .default({ host: "127.0.0.1", port: 0, healthCheckMs: 5_000 })
        .describe("verifiers:<name> environments: where this actor serves POST /inference/v1/generate over its engine for the env server"),
      maxInFlight: pos().default(4).describe("tasks rolled out concurrently; their generations batch together"),
      threads: pos().optional(),
      weightsDeadlineMs: pos().default(60_000).describe("a weights fetch that takes longer fails and is retried (a read can hang when a cluster member dies)"),
      generateDeadlineMs: pos()
        .default(600_000)
        .describe(
          "an engine step (one forward over every running sequence) that takes longer fails; the engine is then wedged and its actor exits to be restarted",
        ),
      maxSeqs: pos()
        .default(256)
        .describe(
          "sequences the engine decodes together (each completion of a group counts); more wait for a slot. The evaluator's engine uses the same engine settings",
        ),
      kvBlocks: pos()
        .optional()
        .describe(
          "KV blocks in the engine's pool: it never holds more than kvBlocks x kvBlockSize tokens of KV, and a request that cannot get blocks waits (or preempts the newest, recomputed later); default: maxSeqs sequences of the full context, at most 1 GiB of fp32 KV, at least one full-context sequence",
        ),
      kvBlockSize: pos().max(1024).default(16).describe("tokens per KV block: the unit of prefix sharing (only full blocks are cached)"),
      maxPrefillTokens: pos()
        .default(2048)
        .describe("prompt tokens computed per engine step over all sequences: a longer prompt is split over steps so decoding sequences keep going"),
      weightUpdate: z
        .enum(["keep", "recompute", "barrier"])
        .default("keep")
        .describe(
          "new weights mid-generation: keep (applied at the next step; running sequences go on with the KV they have, later tokens under the new version), recompute (the same, but their KV is computed again under the new weights first), barrier (running sequences finish under the old weights; new requests wait for the swap). Each token records its version",
        ),
      admission: z
        .enum(["fair", "fcfs"])
        .default("fair")
        .describe(
          "which waiting request joins the batch when it is full: fair (the task with the fewest sequences in flight first, so one task's group and its later turns cannot lock the others out) or fcfs (arrival order)",
        ),
    })
    .default({
      replicas: 1,
      backend: "local",
      servers: [],
      fleet: FleetSchema.parse({}),
      endpoint: { host: "127.0.0.1", port: 0, healthCheckMs: 5_000 },
      maxInFlight: 4,
      weightsDeadlineMs: 60_000,
      generateDeadlineMs: 600_000,
      maxSeqs: 256,
      kvBlockSize: 16,
      maxPrefillTokens: 2048,
      weightUpdate: "keep",
      admission: "fair",
    }),
  reward: z.strictObject({ replicas: pos().default(1), maxInFlight: pos().default(8) }).default({ replicas: 1, maxInFlight: 8 }),
  evaluator: z
    .strictObject({ threads: pos().default(1).describe("kernel threads of the evaluator's own engine: its share of the machine") })
    .default({ threads: 1 }),
  learner: z
    .strictObject({
      rlThreads: pos()
        .optional()
        .describe("learner kernel threads during RL, when inference shares the machine (SFT uses model.threads); default model.threads"),
      sharePrefix: z
        .boolean()
        .default(true)
        .describe(
          "group-prefix packing: samples sharing a token prefix (a group's prompt, a multi-turn history) train it once, their own tokens attending to it (the same loss and gradient as the unpacked rows: kernel tests at the demo's shapes, and every step of a demo run compared on and off); false packs every sample whole",
        ),
      ranks: pos()
        .max(64)
        .default(1)
        .describe(
          "data-parallel learner processes forming one communicator (MPI on the CPU backend; `rollstream actor learner` starts them with mpirun -np N): each trains its share of a step's micro-batches, ZeRO-1 shards the AdamW moments; rank 0 reads the stream, publishes and checkpoints",
        ),
    })
    .default({ sharePrefix: true, ranks: 1 }),
  metricsPort: int().nonnegative().default(0).describe("first Prometheus port; each actor takes the next; 0 = off"),
  lease: z
    .strictObject({
      ttlMs: pos()
        .default(10_000)
        .describe(
          "the run's owners (train, learner, orchestrator, checkpoint, evaluator) hold a lease this long; a second one stands by (train: is refused) and takes over once the lease expires",
        ),
      renewMs: pos().default(2_500).describe("how often a holder renews its lease; an actor that could not renew it in time exits, to stand by"),
    })
    .default({ ttlMs: 10_000, renewMs: 2_500 }),
});

export const RunConfigSchema = z
  .strictObject({
    run: z.string().regex(/^[A-Za-z0-9_-]{1,64}$/, "1-64 characters from [A-Za-z0-9_-]"),
    outDir: z.string().default("runs").describe("run folders live in <outDir>/<run>"),
    seed: int().nonnegative().default(0),
    model: ModelSectionSchema.default(ModelSectionSchema.parse({})),
    tokenizer: z
      .strictObject({
        kind: z.enum(["byte", "hf"]).default("byte").describe("byte: 256 bytes + specials (models from scratch); hf: a Hugging Face tokenizer folder"),
        path: z.string().optional().describe("hf: folder with tokenizer.json (+ tokenizer_config.json, generation_config.json); default model.path"),
      })
      .default({ kind: "byte" }),
    environments: z.array(EnvironmentEntrySchema).min(1),
    sft: SftSchema.optional(),
    rl: RlSchema.default(RlSchema.parse({})),
    eval: EvalSchema.default(EvalSchema.parse({})),
    checkpoint: CheckpointSchema.default(CheckpointSchema.parse({})),
    nats: NatsSchema.default(NatsSchema.parse({})),
    actors: ActorsSchema.default(ActorsSchema.parse({})),
    weights: z
      .strictObject({
        exportDir: z
          .string()
          .optional()
          .describe(
            "external inference servers load each policy version from <exportDir>/v<n> (config.json, model.safetensors, tokenizer files); a folder they can read; default <outDir>/<run>/hf-weights",
          ),
        keepVersions: pos().default(3).describe("newest exported versions kept in exportDir"),
      })
      .default({ keepVersions: 3 }),
    sandbox: z.record(z.string(), z.unknown()).default({}).describe("sandbox actor settings (see sandbox/README.md)"),
  })
  .superRefine((c, ctx) => {
    // The rules live in crossFieldProblems, not here: zod skips this refinement when any field has a type
    // error, so `config check` also runs them on the raw object to report everything in one pass.
    for (const { path, message } of crossFieldProblems(c)) ctx.addIssue({ code: "custom", path, message });
  });

const INVALID = Symbol("invalid");

/**
 * `raw[section][key]` as its own field schema parses it (so an absent value gets its default), or INVALID when
 * the value or its section has the wrong shape. A rule whose input is INVALID is skipped: the schema reports
 * that field already, and a rule checked against a value that isn't one would only add noise.
 */
function fieldOf<T extends z.ZodType>(raw: unknown, section: string, key: string, schema: T): z.output<T> | typeof INVALID {
  const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);
  if (!isRecord(raw)) return INVALID;
  const sec = raw[section];
  if (sec !== undefined && !isRecord(sec)) return INVALID;
  const r = schema.safeParse(sec?.[key]);
  return r.success ? r.data : INVALID;
}

/**
 * The rules that relate several fields, checked on a raw (unparsed) config with defaults applied field by field.
 * RunConfigSchema runs them on its parsed value; `config check` runs them on the raw object when parsing failed,
 * since zod then may have skipped them. Issues have the schema's form, so describeIssues formats both alike.
 */
export function crossFieldProblems(raw: unknown): z.core.$ZodIssueCustom[] {
  const out: z.core.$ZodIssueCustom[] = [];
  const problem = (path: string[], message: string) => out.push({ code: "custom", path, message });
  const rl = RlSchema.shape;
  const model = ModelSectionSchema.shape;
  const tokenizer = RunConfigSchema.shape.tokenizer.unwrap().shape;

  const batchSize = fieldOf(raw, "rl", "batchSize", rl.batchSize);
  const groupSize = fieldOf(raw, "rl", "groupSize", rl.groupSize);
  if (batchSize !== INVALID && groupSize !== INVALID && batchSize % groupSize !== 0) {
    problem(["rl", "batchSize"], `must be a multiple of rl.groupSize (${groupSize})`);
  }
  const advantage = fieldOf(raw, "rl", "advantage", rl.advantage);
  const normalize = fieldOf(raw, "rl", "normalizeAdvantage", rl.normalizeAdvantage);
  if (normalize === true && advantage !== INVALID && advantage !== "mean" && advantage !== "mean_std") {
    problem(["rl", "normalizeAdvantage"], `true means advantage: mean_std, which contradicts rl.advantage: ${advantage} (drop one)`);
  }
  const pool = fieldOf(raw, "rl", "pool", rl.pool);
  if (pool !== INVALID && pool) {
    if (pool.band[0] > pool.band[1]) problem(["rl", "pool", "band"], `low (${pool.band[0]}) must not exceed high (${pool.band[1]})`);
    if (pool.quotas && batchSize !== INVALID && groupSize !== INVALID) {
      const sum = Object.values(pool.quotas).reduce((a, b) => a + b, 0);
      const perStep = batchSize / groupSize;
      if (sum !== perStep)
        problem(["rl", "pool", "quotas"], `must add up to the prompts per step, rl.batchSize / rl.groupSize = ${perStep} (they add up to ${sum})`);
    }
  }
  const hiddenSize = fieldOf(raw, "model", "hiddenSize", model.hiddenSize);
  const numHeads = fieldOf(raw, "model", "numHeads", model.numHeads);
  const numKvHeads = fieldOf(raw, "model", "numKvHeads", model.numKvHeads);
  if (hiddenSize !== INVALID && numHeads !== INVALID && hiddenSize % numHeads !== 0) {
    problem(["model", "hiddenSize"], `must be divisible by numHeads (${numHeads})`);
  }
  if (numHeads !== INVALID && numKvHeads !== INVALID && numHeads % numKvHeads !== 0) {
    problem(["model", "numKvHeads"], `must divide numHeads (${numHeads})`);
  }
  const lease = fieldOf(raw, "actors", "lease", ActorsSchema.shape.lease);
  if (lease !== INVALID && lease.renewMs * 2 > lease.ttlMs) {
    problem(["actors", "lease", "renewMs"], `must be at most half of actors.lease.ttlMs (${lease.ttlMs}): a holder renews at least twice per lease`);
  }
  const inference = fieldOf(raw, "actors", "inference", ActorsSchema.shape.inference);
  if (inference !== INVALID && inference.backend !== "local" && inference.servers.length === 0) {
    problem(["actors", "inference", "servers"], `backend ${inference.backend} needs at least one server URL`);
  }
  const kind = fieldOf(raw, "tokenizer", "kind", tokenizer.kind);
  const tokenizerPath = fieldOf(raw, "tokenizer", "path", tokenizer.path);
  const modelPath = fieldOf(raw, "model", "path", model.path);
  if (kind === "hf" && tokenizerPath !== INVALID && modelPath !== INVALID && !tokenizerPath && !modelPath) {
    problem(["tokenizer", "path"], "kind hf needs tokenizer.path or model.path (the folder with tokenizer.json)");
  }
  return out;
}

export type RunConfig = z.infer<typeof RunConfigSchema>;
export type { OptimizerConfig } from "../../kernels/optimizer.js";

/** The keys an object schema accepts at `path` of the run config (for "did you mean"). */
function keysAt(path: PropertyKey[]): string[] {
  // Through defaults, optionals and preprocess pipes to the object (or array) schema underneath.
  const unwrap = (t: z.ZodType): z.ZodType => {
    if (t instanceof z.ZodDefault || t instanceof z.ZodOptional) return unwrap(t.unwrap() as z.ZodType);
    if (t instanceof z.ZodPipe) return unwrap(t.in as z.ZodType);
    return t;
  };
  let node = unwrap(RunConfigSchema);
  for (const part of path) {
    if (node instanceof z.ZodObject && typeof part === "string" && part in node.shape) node = unwrap(node.shape[part] as z.ZodType);
    else if (node instanceof z.ZodArray && typeof part === "number") node = unwrap(node.element as z.ZodType);
    else return [];
  }
  return node instanceof z.ZodObject ? Object.keys(node.shape) : [];
}

/** One line per problem; an unknown key names the closest key that exists there. */
export function describeIssues(issues: z.core.$ZodIssue[]): string[] {
  const out: string[] = [];
  for (const i of issues) {
    const where = i.path.length ? i.path.join(".") : "(root)";
    if (i.code === "unrecognized_keys") {
      const known = keysAt(i.path);
      for (const k of i.keys) {
        const best = known.length ? closest(k, known) : undefined;
        const near = best !== undefined && distance(k.toLowerCase(), best.toLowerCase()) <= Math.max(2, Math.floor(k.length / 3));
        const hint = near ? `; did you mean "${best}"?` : known.length ? ` (known: ${known.join(", ")})` : "";
        out.push(`${i.path.length ? `${where}.` : ""}${k}: unknown key${hint}`);
      }
    } else out.push(`${where}: ${i.message}`);
  }
  return out;
}

export class ConfigError extends Error {
  constructor(
    readonly source: string,
    readonly problems: string[],
    message = `invalid config ${source}:\n${problems.map((p) => `  - ${p}`).join("\n")}`,
  ) {
    super(message);
    this.name = "ConfigError";
  }
}

/** A config path that names no file: one line, "no config file at <path>" (not "invalid config … ENOENT"). */
export class MissingConfigError extends ConfigError {
  constructor(path: string) {
    const line = `no config file at ${path}`;
    super(path, [line], line);
  }
}

/** A config's text; MissingConfigError when the path names no file, ConfigError when it cannot be read. */
export function readConfigText(path: string): string {
  try {
    return readFileSync(path, "utf8");
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === "ENOENT") throw new MissingConfigError(path);
    throw new ConfigError(path, [`cannot read file: ${(e as Error).message}`]);
  }
}

export function parseRunConfig(raw: unknown, source = "(inline)"): RunConfig {
  const r = RunConfigSchema.safeParse(raw);
  if (!r.success) {
    throw new ConfigError(source, describeIssues(r.error.issues));
  }
  return r.data;
}

export function loadRunConfig(path: string): RunConfig {
  const text = readConfigText(path);
  let raw: unknown;
  try {
    raw = parseYaml(text);
  } catch (e) {
    throw new ConfigError(path, [`not valid YAML: ${(e as Error).message}`]);
  }
  return parseRunConfig(raw, path);
}

/** The advantage estimator a run uses: rl.advantage, with the older rl.normalizeAdvantage: true meaning mean_std. */
export function advantageKindOf(rl: { advantage: "mean" | "mean_std" | "rloo"; normalizeAdvantage: boolean }): "mean" | "mean_std" | "rloo" {
  return rl.normalizeAdvantage ? "mean_std" : rl.advantage;
}

/** How the learner packs a step's samples into micro-batches (the learner and replay must agree). */
export function packSettingsOf(cfg: RunConfig): { microBatchTokens: number; sharePrefix: boolean } {
  return { microBatchTokens: cfg.rl.microBatchTokens, sharePrefix: cfg.actors.learner.sharePrefix };
}
