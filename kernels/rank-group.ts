// The learner's ranks as one group (actors.learner.ranks > 1): rank 0 leads, ranks 1..N-1 follow its plans.
//
// Rank 0 alone talks to NATS: it reads the scored stream, chooses each step's rows (staleness, pace, dead letters,
// the step guard's retries), publishes weights, StepRecords and checkpoints, and holds the learner's lease. Before
// every collective piece of work it broadcasts a plan over MPI: "train these samples with this loss and these
// optimizer settings", "load this training state", "gather the moments", "stop". The followers only ever do what a
// plan says, in the order rank 0 sent them, so every rank enters the same collectives in the same order.
//
// Why rank 0 hands out the rows instead of every rank reading the stream itself: which rows a step trains is not a
// pure function of the stream. Under rl.staleness pace it depends on when messages arrived; the step guard sets
// batches aside and tops the step up; a restored learner follows the sequences its earlier life recorded. Readers
// on N ranks would have to agree on all of that, and a follower that acked, dead-lettered or timed out differently
// would train other rows without any error. A broadcast makes the rows identical by construction, followers need
// no NATS connection, lease or consumer, and the cost is one copy of the step's token ids (a few MB) over the
// communicator, next to the gradient's reduce-scatter of the whole model.
//
// With model.lora the group trains the adapters (kernels/zero1-lora.ts): they reach the followers inside a state plan
// (the training state carries the adapters, their settings and moments), so the protocol has no LoRA plan of its own;
// a train plan carries the step only because LoRA dropout's masks are keyed by it.
//
// A follower waits for the next plan in a non-blocking broadcast polled on a timer (MPI_Ibcast + MPI_Test), not in
// a blocking collective: Open MPI busy-polls, and rank 0 may wait minutes for samples while inference needs the cores.
import { parseBackendInfo } from "./index.js";
import { resolveBackend, type NativeComm } from "./native.js";
import { decodeTrainStateWithLora, splitMoments } from "./train-state.js";
import type { ParsedLossSpec } from "./loss-spec.js";
import type { OptimizerConfig } from "./optimizer.js";
import { packSamples, type TrainSample } from "./packing.js";
import type { OptimizerState, PolicyModel } from "./policy-model.js";
import { isInputCaused } from "./train-errors.js";
import { trainOnRanks, type StepReport } from "./train-step.js";
import { Zero1Optimizer } from "./zero1.js";
import { Zero1Adapters } from "./zero1-lora.js";
import type { LoraAdapters } from "./lora.js";

export interface PackSettings {
  microBatchTokens: number;
  sharePrefix: boolean;
}

/** What rank 0 tells the followers to do next. */
export type RankPlan =
  | {
      kind: "train";
      samples: TrainSample[];
      loss: ParsedLossSpec;
      opt: OptimizerConfig;
      pack: PackSettings;
      /** The step's index (LoRA dropout's masks are keyed by it, as on one process). */
      step: number;
      threads: number;
      blasRoutes?: string;
    }
  | { kind: "state"; bytes: Uint8Array }
  | { kind: "moments"; step: number }
  | { kind: "freshMoments" }
  | { kind: "gather" }
  | { kind: "stop" };

type TrainPlan = Extract<RankPlan, { kind: "train" }>;
/** A plan's JSON header: a train plan's settings with its samples' lengths (their tokens follow as binary). */
type Header =
  | (Omit<TrainPlan, "samples"> & { lens: Array<[number, number, number]> })
  | { kind: "state"; bytes: number }
  | { kind: "moments"; step: number }
  | { kind: "freshMoments" | "gather" | "stop" };

// JSON has no Infinity (maxGradNorm may be one): non-finite numbers travel as strings.
const replacer = (_k: string, v: unknown) => (typeof v === "number" && !Number.isFinite(v) ? `#num:${v}` : v);
const reviver = (_k: string, v: unknown) => (typeof v === "string" && v.startsWith("#num:") ? Number(v.slice(5)) : v);

/**
 * A plan as bytes: u32 header length, the JSON header padded to 4 bytes, then (train) every sample's prompt ids and
 * completion ids as Int32, sampler logprobs as Float32 and completion masks as Uint8, sample after sample; (state) the
 * training state's bytes. Exact: the followers pack the very values rank 0 packs.
 */
export function encodePlan(plan: RankPlan): Uint8Array {
  let header: Header;
  let body = 0;
  if (plan.kind === "train") {
    const lens = plan.samples.map((s): [number, number, number] => [s.promptIds.length, s.completionIds.length, s.advantage]);
    header = { kind: "train", loss: plan.loss, opt: plan.opt, pack: plan.pack, step: plan.step, threads: plan.threads, blasRoutes: plan.blasRoutes, lens };
    for (const [p, c] of lens) body += 4 * p + 4 * c + 4 * c + c;
  } else if (plan.kind === "state") {
    header = { kind: "state", bytes: plan.bytes.length };
    body = plan.bytes.length;
  } else if (plan.kind === "moments") {
    header = { kind: "moments", step: plan.step };
  } else header = { kind: plan.kind };
  const json = new TextEncoder().encode(JSON.stringify(header, replacer));
  const start = 4 + Math.ceil(json.length / 4) * 4;
  const out = new Uint8Array(start + body);
  new DataView(out.buffer).setUint32(0, json.length, true);
  out.set(json, 4);
  if (plan.kind === "state") out.set(plan.bytes, start);
  if (plan.kind === "train") {
    const words = plan.samples.reduce((n, s) => n + s.promptIds.length + 2 * s.completionIds.length, 0);
    const i32 = new Int32Array(out.buffer, start, words);
    const f32 = new Float32Array(out.buffer, start, words);
    let w = 0;
    let b = start + 4 * words;
    for (const s of plan.samples) {
      i32.set(s.promptIds, w);
      w += s.promptIds.length;
      i32.set(s.completionIds, w);
      w += s.completionIds.length;
      f32.set(s.samplerLogprobs, w);
      w += s.completionIds.length;
      out.set(s.completionMask, b);
      b += s.completionIds.length;
    }
  }
  return out;
}

export function decodePlan(bytes: Uint8Array): RankPlan {
  const n = new DataView(bytes.buffer, bytes.byteOffset).getUint32(0, true);
  const header = JSON.parse(new TextDecoder().decode(bytes.subarray(4, 4 + n)), reviver) as Header;
  const start = 4 + Math.ceil(n / 4) * 4;
  if (header.kind === "state") return { kind: "state", bytes: bytes.slice(start, start + header.bytes) };
  if (header.kind === "moments") return { kind: "moments", step: header.step };
  if (header.kind !== "train") return { kind: header.kind };
  const words = header.lens.reduce((a, [p, c]) => a + p + 2 * c, 0);
  const body = bytes.slice(start); // aligned copy
  const i32 = new Int32Array(body.buffer, 0, words);
  const f32 = new Float32Array(body.buffer, 0, words);
  let w = 0;
  let b = 4 * words;
  const samples: TrainSample[] = header.lens.map(([p, c, advantage]) => {
    const promptIds = i32.slice(w, w + p);
    const completionIds = i32.slice(w + p, w + p + c);
    const samplerLogprobs = f32.slice(w + p + c, w + p + 2 * c);
    w += p + 2 * c;
    const completionMask = body.slice(b, b + c);
    b += c;
    return { promptIds, completionIds, completionMask, samplerLogprobs, advantage };
  });
  return {
    kind: "train",
    samples,
    loss: header.loss,
    opt: header.opt,
    pack: header.pack,
    step: header.step,
    threads: header.threads,
    ...(header.blasRoutes !== undefined ? { blasRoutes: header.blasRoutes } : {}),
  };
}

/** Sleeps between polls of a pending broadcast: short enough not to slow a step, long enough to leave the core. */
const POLL_MS = 2;

/** Broadcasts rank 0's plan (any rank calls it; rank 0 passes the plan, the others null and get it back). */
export async function broadcastPlan(comm: NativeComm, plan: RankPlan | null): Promise<RankPlan> {
  const bytes = plan ? encodePlan(plan) : null;
  const size = new Float64Array([bytes?.length ?? 0]);
  const req = comm.bcastBegin(size, 0);
  while (!comm.test(req)) await new Promise((r) => setTimeout(r, POLL_MS));
  const buf = bytes ?? new Uint8Array(size[0]!);
  comm.bcast(buf, 0);
  return plan ?? decodePlan(buf);
}

/** The pieces every rank holds: its model, its ZeRO-1 slice of the optimizer (the adapters' with LoRA), the communicator. */
export class RankGroup {
  readonly zero: Zero1Optimizer;
  /** model.lora: the adapters every rank trains, with this rank's slice of their moments; null trains every weight. */
  adapters: Zero1Adapters | null = null;

  constructor(
    readonly model: PolicyModel,
    readonly comm: NativeComm,
    readonly rank: number,
    readonly size: number,
  ) {
    this.zero = new Zero1Optimizer(model, comm, rank, size); // keeps the model's moments on this rank's slice
  }

  /** Rank 0: every rank trains `samples` as step `step` (lr already scheduled). */
  async train(samples: TrainSample[], loss: ParsedLossSpec, opt: OptimizerConfig, pack: PackSettings, step: number): Promise<StepReport> {
    // The CPU sgemm routes rank 0 measured (or pinned from its earlier life): every rank computes its micro-batches
    // with the same products, so a step recomputed after a restart has the bits of its first attempt.
    const blasRoutes = parseBackendInfo(resolveBackend(this.model.device).backend.info()).blasRoutes;
    const plan = { kind: "train", samples, loss, opt, pack, step, threads: this.model.threads, ...(blasRoutes ? { blasRoutes } : {}) } as const;
    await broadcastPlan(this.comm, plan);
    return this.trainLocal(plan);
  }

  /**
   * Rank 0, after it decoded a training state into its model (with `lora`: the adapters it decoded or started, which
   * the state holds): the followers load the same bytes; from then on the group trains those adapters.
   */
  async loadState(bytes: Uint8Array, lora: LoraAdapters | null = null): Promise<void> {
    // The whole model's moments do not travel in the state: each follower gets only its slice after it (a state
    // holds them whole, three times the model, more than any rank should hold at once). Rank 0's model took its slice
    // of them when it decoded the state.
    const split = lora ? null : splitMoments(bytes);
    await broadcastPlan(this.comm, { kind: "state", bytes: split?.slim ?? bytes });
    if (split) {
      await broadcastPlan(this.comm, { kind: "moments", step: split.step });
      this.zero.scatter(split);
    }
    this.useState(lora);
  }

  /** Rank 0: every rank starts fresh AdamW moments (RL after SFT). */
  async freshMoments(): Promise<void> {
    await broadcastPlan(this.comm, { kind: "freshMoments" });
    this.resetMoments();
  }

  /**
   * Rank 0: gathers every rank's slice of the moments (what its checkpoint encodes): the whole model's, returned (the
   * model keeps its slice), or the adapters', into its LoraAdapters (undefined returned).
   */
  async gather(): Promise<OptimizerState | undefined> {
    await broadcastPlan(this.comm, { kind: "gather" });
    if (!this.adapters) return this.zero.fullState();
    const s = this.adapters.fullState();
    this.adapters.lora.m.set(s.m);
    this.adapters.lora.v.set(s.v);
    this.adapters.lora.step = s.step;
    return undefined;
  }

  /** Rank 0: the followers finish (their plan loop returns), then every rank leaves MPI. */
  async stop(): Promise<void> {
    await broadcastPlan(this.comm, { kind: "stop" });
    this.comm.finalize();
  }

  /** Ranks 1..N-1: does rank 0's plans until it says stop. An error the input caused waits for the next plan. */
  async follow(log: (msg: string, fields?: object) => void): Promise<void> {
    for (;;) {
      const plan = await broadcastPlan(this.comm, null);
      if (plan.kind === "stop") break;
      if (plan.kind === "state") {
        this.useState(decodeTrainStateWithLora(this.model, plan.bytes).lora);
        log("loaded rank 0's training state", { step: (this.adapters ?? this.zero).steps, lora: this.adapters !== null });
      } else if (plan.kind === "moments") {
        this.zero.scatter({ step: plan.step });
        log("took its slice of rank 0's moments", { step: this.zero.steps });
      } else if (plan.kind === "freshMoments") this.resetMoments();
      else if (plan.kind === "gather") (this.adapters ?? this.zero).fullState();
      else {
        if (plan.threads !== this.model.threads) this.model.setThreads(plan.threads);
        this.followRoutes(plan.blasRoutes);
        try {
          const r = await this.trainLocal(plan);
          log("step", { step: r.optimizerStep, loss: r.loss, ms: Math.round(r.ms), microBatches: r.microBatches, mine: r.mine });
        } catch (e) {
          if (!isInputCaused(e)) throw e;
          log("step refused its input; rank 0 plans it again", { err: (e as Error).message });
        }
      }
    }
    this.comm.finalize();
  }

  private async trainLocal(plan: TrainPlan): Promise<StepReport & { microBatches: number; mine: number }> {
    const { pack } = plan;
    const packed = packSamples(plan.samples, pack.microBatchTokens, this.model.config.maxPositionEmbeddings, { sharePrefix: pack.sharePrefix });
    const n = packed.microBatches.length;
    const mine = Math.floor(n / this.size) + (this.rank < n % this.size ? 1 : 0);
    const zero = this.adapters ?? this.zero;
    const r = await trainOnRanks(this.model, packed, plan.loss, plan.opt, zero, this.adapters?.lora, plan.step);
    return { ...r, microBatches: n, mine };
  }

  /** After a state plan: this rank's slice of the state's moments (the model's, and the adapters' when it has them). */
  private useState(lora: LoraAdapters | null): void {
    // The model took its slice of the state's moments when the state was decoded (importOptimizerState).
    this.adapters = lora ? new Zero1Adapters(lora, this.model, this.comm, this.rank, this.size) : null;
  }

  /** Pins rank 0's sgemm routes (classes it has not measured yet are still measured here). */
  private followRoutes(routes: string | undefined): void {
    if (!routes?.includes("=")) return;
    const backend = resolveBackend(this.model.device).backend;
    if (backend.settings().blasRoutes !== routes && parseBackendInfo(backend.info()).blasMode === "auto")
      backend.setSettings({ ...backend.settings(), blasRoutes: routes });
  }

  private resetMoments(): void {
    this.zero.reset();
    const k = this.adapters?.lora.params.length ?? 0;
    this.adapters?.restore({ m: new Float32Array(k), v: new Float32Array(k), step: 0 });
  }
}
