// Serves generate() calls from environments by continuous batching over the kernels' step-level engine
// (kernels/engine.ts): a request joins the running batch at the next step and leaves it when its sequence
// finishes, so nobody waits for the longest sequence of a batch. Environments run one rollout per call;
// batching across rollouts and tasks happens here.
//
// - Groups: calls that arrive together with the same prompt and sampling arguments (a task's groupSize rollouts
//   start at once) become one engine request with one seed each, so the prompt is prefilled once and its KV
//   blocks are shared copy-on-write. Each completion keeps its own seed, so its tokens are those it would get alone.
// - Multi-turn: every request carries the same cache salt, so a continuation (the conversation so far plus a new
//   turn) finds the blocks its earlier turns computed, as long as the pool still holds them.
// - Weights: new weights are written between two steps. weightUpdate "keep" and "recompute" apply them at the next
//   step boundary (at most one step late; running sequences go on with their KV, or prefill it again); "barrier"
//   lets running sequences finish under the old weights and admits nothing new until the swap. Every token records
//   the version it was sampled under, and a generation whose tokens span versions carries versionSpans.
// - Serving (`rollstream serve`): submit() takes a request's own seed, extra stop ids and cache salt, streams its
//   tokens, and returns them with the version of each; pause() (keep: freeze, abort: end what runs with its partial
//   output, wait: let it finish) and resume() follow vLLM's /pause modes; updateWeights() resolves once they are in use.
import { type EngineStats, type EngineStep, type InferenceEngine, type PolicyModel, type StopReason, versionSpans } from "../../kernels/index.js";
import type { Tokenizer } from "../../kernels/tokenizer.js";
import type { Generation, ModelClient, SamplingArgs } from "../../environments/api/index.js";
import { DeadlineError, withDeadline } from "../../streams/index.js";
import type { EngineFigures } from "../../streams/index.js";
import { EngineMeter } from "./engine-meter.js";
import { engineSizing } from "./engine-sizing.js";
import type { RunConfig } from "./config.js";

export type WeightUpdate = "keep" | "recompute" | "barrier";

export interface PolicyEngineOptions {
  /** Base seed; each request gets seed + a counter unless its client was given one. */
  seed?: number;
  /** KV blocks in the pool; default: see engine-sizing.ts. */
  kvBlocks?: number;
  kvBlockSize?: number;
  /** Sequences decoded together (each completion of a group counts). */
  maxSeqs?: number;
  /** Prompt tokens computed per step over all sequences (a longer prompt is split over steps). */
  maxPrefillTokens?: number;
  weightUpdate?: WeightUpdate;
  /** The prefix cache is shared only between requests with the same salt: one per run. */
  cacheSalt?: number;
  /**
   * A step that takes longer fails every request in flight with a DeadlineError, and the engine refuses all later
   * ones: the native call cannot be interrupted, so an engine past its deadline is wedged and its actor should exit
   * (onWedged) for its launcher to start a fresh one.
   */
  generateDeadlineMs?: number;
  onWedged?: (e: DeadlineError) => void;
  /** New weights are in use: how long after swapWeights (loadMs of it writing them into the model), and how many steps ran meanwhile. */
  onWeightsApplied?: (w: { version: number; waitedMs: number; loadMs: number; steps: number }) => void;
  /** Weights that could not be loaded between steps (the old ones stay). */
  onWeightsError?: (e: Error, version: number) => void;
}

/** One request as `rollstream serve` makes it (see submit). */
export interface SubmitOptions {
  args: SamplingArgs;
  /** Default: the engine's seed plus a counter. */
  seed?: number;
  /** Ids that end the generation besides the tokenizer's stop ids (or instead of them, with ignoreEos). */
  stopTokenIds?: readonly number[];
  ignoreEos?: boolean;
  /** Prefix-cache namespace (blocks are shared only between equal salts); default the engine's. */
  cacheSalt?: bigint;
  signal?: AbortSignal;
  /** Each token as it is sampled (streaming). */
  onToken?(t: { token: number; logprob: number; version: number }): void;
}

/** What submit() resolves with: every sampled token, its logprob and the weights version it was sampled under. */
export interface SubmitResult {
  tokenIds: number[];
  logprobs: number[];
  versions: number[];
  /** abort: ended early by pause("abort") or abortAll(), with the tokens it had. */
  finish: StopReason | "abort";
}

interface Request {
  prompt: Int32Array;
  /** Requests with equal keys arriving together become one engine request. */
  key: string;
  args: SamplingArgs;
  seed: number;
  stopTokenIds: readonly number[] | undefined;
  ignoreEos: boolean;
  cacheSalt: bigint | undefined;
  onToken: SubmitOptions["onToken"];
  /** Set once it resolved or failed: later tokens of its sequence are dropped. */
  done: boolean;
  resolve(r: SubmitResult): void;
  reject(e: unknown): void;
  detach(): void;
  seqId: number;
  tokens: number[];
  logprobs: number[];
  versions: number[];
}

interface PendingWeights {
  version: number;
  bytes: Uint8Array;
  since: number;
  stepsAtRequest: number;
  /** updateWeights() callers: told when these weights (or newer ones that replaced them) are in use, or failed. */
  waiters: { resolve(): void; reject(e: Error): void }[];
}

export class PolicyEngine {
  /** Arrived, not yet handed to the engine. */
  private arrived: Request[] = [];
  /** In the engine, by sequence id. */
  private live = new Map<number, Request>();
  /** Aborted while in the engine: cancelled at the next step boundary. */
  private toCancel: number[] = [];
  private watched = new Map<AbortSignal, { requests: Set<Request>; onAbort: () => void }>();
  private engine: InferenceEngine | null = null;
  private looping = false;
  private stepping = false;
  private pendingWeights: PendingWeights | null = null;
  private counter = 0;
  private steps = 0;
  private readonly meter = new EngineMeter();
  /** pause(): "draining" admits nothing new; "frozen" also runs no step. */
  private pauseState: "running" | "draining" | "frozen" = "running";
  /** The weights version in use: tokens sampled from now on carry it. */
  version: number;
  generatedTokens = 0;
  /** Set once a step passed its deadline: every later request fails with it. */
  wedged: DeadlineError | null = null;

  constructor(
    private model: PolicyModel,
    readonly tokenizer: Tokenizer,
    version: number,
    private readonly opts: PolicyEngineOptions = {},
  ) {
    this.version = version;
  }

  /** The newest version swapWeights was given (in use, or to be applied at the next step boundary). */
  get latestVersion(): number {
    return this.pendingWeights?.version ?? this.version;
  }

  /**
   * Weights for `version` are applied at the next step boundary (see weightUpdate). Normally versions only go up;
   * a learner restored from an older checkpoint rolls them back, and `rollback` follows it there.
   */
  swapWeights(version: number, safetensors: Uint8Array, rollback = false): void {
    if (this.wedged) return;
    if (!rollback && version <= this.latestVersion) return;
    const since = this.pendingWeights?.since ?? performance.now();
    const stepsAtRequest = this.pendingWeights?.stepsAtRequest ?? this.steps;
    const waiters = this.pendingWeights?.waiters ?? [];
    this.pendingWeights = { version, bytes: safetensors, since, stepsAtRequest, waiters };
    if (!this.stepping && this.weightsDue()) this.applyPendingWeights(true);
  }

  /**
   * swapWeights, resolved once the weights are in use (or newer ones that replaced them before the next step
   * boundary); rejected when they could not be loaded (the old ones stay).
   */
  updateWeights(version: number, safetensors: Uint8Array, rollback = false): Promise<void> {
    if (this.wedged) return Promise.reject(this.wedged);
    return new Promise<void>((resolve, reject) => {
      try {
        this.swapWeights(version, safetensors, rollback);
      } catch (e) {
        return reject(e);
      }
      if (this.pendingWeights) this.pendingWeights.waiters.push({ resolve, reject });
      else resolve();
    });
  }

  get paused(): boolean {
    return this.pauseState !== "running";
  }

  /**
   * Stops admitting requests (they queue until resume). keep: running sequences freeze where they are (the step in
   * flight ends first) and go on after resume, under whatever weights are in use then; abort: they end now with
   * their partial output (finish "abort"), as do queued ones; wait: they run to their end first. Resolves with the
   * number of requests aborted.
   */
  async pause(mode: "keep" | "abort" | "wait"): Promise<number> {
    if (this.pauseState === "running") this.pauseState = "draining";
    let aborted = 0;
    if (mode === "abort") aborted = this.abortAll();
    if (mode === "wait") while (this.live.size > 0 && !this.wedged) await new Promise((r) => setTimeout(r, 2));
    this.pauseState = "frozen";
    while (this.stepping) await new Promise<void>((r) => setImmediate(r));
    return aborted;
  }

  resume(): void {
    this.pauseState = "running";
    if (this.live.size > 0 || this.arrived.length > 0) this.kick();
  }

  /** Ends every request, queued or running, now, each with the tokens it has and finish "abort"; returns how many. */
  abortAll(): number {
    let n = 0;
    for (const r of this.arrived.splice(0)) n += this.settle(r, "abort") ? 1 : 0;
    for (const [id, r] of this.live) {
      if (!this.settle(r, "abort")) continue;
      this.toCancel.push(id);
      n++;
    }
    return n;
  }

  /**
   * One request with its own seed, stop ids and cache salt (the serving path); requests with the same prompt and
   * settings that arrive together still share one prefill.
   */
  submit(promptIds: readonly number[], o: SubmitOptions): Promise<SubmitResult> {
    return this.enqueue(promptIds, o.args, o.seed, o.signal, o);
  }

  client(seedBase?: number): ModelClient {
    let local = 0;
    return {
      tokenizer: this.tokenizer,
      generate: async (promptIds, args, signal) => {
        const out = await this.enqueue(promptIds, args, seedBase === undefined ? undefined : (seedBase + local++) >>> 0, signal);
        if (out.finish === "abort") throw new Error("generation aborted");
        return this.generation(out, out.finish);
      },
    };
  }

  /** The scheduler's figures as of the last step (running / waiting sequences, KV blocks, rates). */
  figures(): EngineFigures {
    return this.meter.figures(this.arrived.length);
  }

  /** The engine's counters as of its last step (prefill rows, prefix hits, ...); null before its first request. */
  engineStats(): EngineStats | null {
    return this.meter.stats;
  }

  /**
   * Frees the engine's KV pool: requests not finished fail, the step in flight (if any) ends first. Await it before
   * disposing the model. A later request creates the engine again.
   */
  async dispose(): Promise<void> {
    const gone = new Error("the policy engine was disposed");
    for (const r of this.arrived.splice(0)) this.fail(r, gone);
    for (const [id, r] of this.live) {
      this.fail(r, gone);
      this.toCancel.push(id);
    }
    while (this.looping) await new Promise<void>((r) => setImmediate(r));
    const engine = this.engine;
    this.engine = null;
    // A wedged engine's step never ended: its native engine stays with the process.
    if (engine && !this.wedged) engine.dispose();
  }

  private enqueue(
    promptIds: readonly number[],
    args: SamplingArgs,
    seed: number | undefined,
    signal?: AbortSignal,
    o: Partial<SubmitOptions> = {},
  ): Promise<SubmitResult> {
    if (signal?.aborted) return Promise.reject(new Error("generation aborted"));
    if (this.wedged) return Promise.reject(this.wedged);
    const ctxLen = this.model.config.maxPositionEmbeddings;
    const prompt = Int32Array.from(promptIds.length >= ctxLen ? promptIds.slice(-(ctxLen - 1)) : promptIds);
    const extra = `${o.ignoreEos ? "!" : ""}${(o.stopTokenIds ?? []).join(",")}|${o.cacheSalt ?? ""}`;
    return new Promise<SubmitResult>((resolve, reject) => {
      const r: Request = {
        prompt,
        key: `${argsKey(args)}|${extra}#${prompt.join(",")}`,
        args,
        seed: seed ?? ((this.opts.seed ?? 0) + this.counter++) >>> 0,
        stopTokenIds: o.stopTokenIds,
        ignoreEos: o.ignoreEos === true,
        cacheSalt: o.cacheSalt,
        onToken: o.onToken,
        done: false,
        resolve,
        reject,
        detach: () => undefined,
        seqId: 0,
        tokens: [],
        logprobs: [],
        versions: [],
      };
      if (signal) r.detach = this.watch(signal, r);
      this.arrived.push(r);
      this.kick();
    });
  }

  /**
   * One abort listener per signal, however many requests share it (every request of an actor carries the actor's
   * signal: a listener each would pile up); returns what forgets the request.
   */
  private watch(signal: AbortSignal, r: Request): () => void {
    let set = this.watched.get(signal);
    if (!set) {
      const requests = new Set<Request>();
      const onAbort = () => {
        this.watched.delete(signal);
        for (const x of requests) this.abort(x);
      };
      signal.addEventListener("abort", onAbort, { once: true });
      this.watched.set(signal, (set = { requests, onAbort }));
    }
    set.requests.add(r);
    const entry = set;
    return () => {
      entry.requests.delete(r);
      if (entry.requests.size > 0 || this.watched.get(signal) !== entry) return;
      signal.removeEventListener("abort", entry.onAbort);
      this.watched.delete(signal);
    };
  }

  private abort(r: Request): void {
    const i = this.arrived.indexOf(r);
    if (i >= 0) this.arrived.splice(i, 1);
    else if (this.live.get(r.seqId) === r && !r.done) this.toCancel.push(r.seqId);
    else return;
    this.fail(r, new Error("generation aborted"));
  }

  /** Resolves `r` with what it has; false when it had already ended. */
  private settle(r: Request, finish: SubmitResult["finish"]): boolean {
    if (r.done) return false;
    r.done = true;
    r.detach();
    r.resolve({ tokenIds: r.tokens.slice(), logprobs: r.logprobs.slice(), versions: r.versions.slice(), finish });
    return true;
  }

  private kick(): void {
    if (this.looping || this.wedged || this.pauseState === "frozen") return;
    this.looping = true;
    // Let every rollout that is about to ask (a task's whole group) arrive before the first step.
    setImmediate(() => void this.loop());
  }

  /** One engine step per iteration; requests join and leave between steps. */
  private async loop(): Promise<void> {
    try {
      for (;;) {
        this.betweenSteps();
        if (this.live.size === 0 || this.wedged || this.pauseState === "frozen") return;
        const out = await this.step(this.engine!);
        if (!out) return;
        this.deliver(out);
      }
    } finally {
      this.looping = false;
    }
  }

  /** Cancellations, weights and admissions: everything that must not happen while a step runs. */
  private betweenSteps(): void {
    for (const id of this.toCancel.splice(0)) {
      if (!this.live.delete(id)) continue;
      this.engine!.cancel(id);
    }
    if (this.pendingWeights && this.weightsDue()) this.applyPendingWeights(false);
    // Barrier: nothing new starts on weights about to be replaced.
    if (this.pendingWeights && this.opts.weightUpdate === "barrier") return;
    if (this.arrived.length > 0 && this.pauseState === "running") this.admit(this.arrived.splice(0));
  }

  private weightsDue(): boolean {
    return this.opts.weightUpdate !== "barrier" || this.live.size === 0;
  }

  private applyPendingWeights(throwErrors: boolean): void {
    const w = this.pendingWeights!;
    this.pendingWeights = null;
    const t0 = performance.now();
    try {
      this.model.loadSafetensors(w.bytes);
    } catch (e) {
      for (const x of w.waiters) x.reject(e as Error);
      if (throwErrors) throw e;
      this.opts.onWeightsError?.(e as Error, w.version);
      return;
    }
    for (const x of w.waiters) x.resolve();
    this.version = w.version;
    this.engine?.setVersion(w.version, this.opts.weightUpdate === "recompute" ? "recompute" : "keep");
    const now = performance.now();
    this.opts.onWeightsApplied?.({ version: w.version, waitedMs: now - w.since, loadMs: now - t0, steps: this.steps - w.stepsAtRequest });
  }

  /** Hands arrived requests to the engine, those with the same prompt and arguments as one group. */
  private admit(requests: Request[]): void {
    let engine: InferenceEngine;
    try {
      engine = this.engine ?? this.createEngine();
    } catch (e) {
      for (const r of requests) this.fail(r, e);
      return;
    }
    const groups = new Map<string, Request[]>();
    for (const r of requests) {
      const g = groups.get(r.key);
      if (g) g.push(r);
      else groups.set(r.key, [r]);
    }
    for (const group of groups.values()) {
      try {
        const ids = engine.add(this.engineRequest(group));
        group.forEach((r, i) => {
          r.seqId = ids[i]!;
          this.live.set(r.seqId, r);
        });
      } catch (e) {
        for (const r of group) this.fail(r, e);
      }
    }
  }

  private engineRequest(group: Request[]) {
    const { args, prompt, stopTokenIds, ignoreEos, cacheSalt } = group[0]!;
    const stopSequences = (args.stop ?? []).map((s) => Int32Array.from(this.tokenizer.encode(s)));
    const eos = [...new Set([...(ignoreEos ? [] : this.tokenizer.stopTokenIds()), ...(stopTokenIds ?? [])])];
    return {
      prompt,
      seeds: group.map((r) => r.seed),
      maxNewTokens: args.maxTokens,
      temperature: args.temperature,
      topP: args.topP,
      topK: args.topK,
      eosTokenId: eos,
      stopSequences: stopSequences.length ? stopSequences : undefined,
      // A checkpoint's embedding may be padded past its tokenizer (Qwen's is): never draw an id it cannot decode.
      vocabLimit: this.tokenizer.vocabSize < this.model.config.vocabSize ? this.tokenizer.vocabSize : undefined,
      cacheSalt: cacheSalt ?? this.opts.cacheSalt ?? 0,
    };
  }

  private createEngine(): InferenceEngine {
    const s = engineSizing(this.model.config, this.opts);
    const engine = this.model.createEngine({ nBlocks: s.kvBlocks, blockSize: s.kvBlockSize, maxSeqs: s.maxSeqs, maxPrefillTokens: s.maxPrefillTokens });
    if (this.version !== 0) engine.setVersion(this.version, "keep");
    this.engine = engine;
    this.meter.observe(engine.stats());
    return engine;
  }

  /** One step, under the deadline; null when the engine is wedged or the step failed (its requests are failed). */
  private async step(engine: InferenceEngine): Promise<EngineStep | null> {
    const deadline = this.opts.generateDeadlineMs;
    this.stepping = true;
    try {
      const call = engine.step();
      const out = deadline ? await withDeadline(call, deadline, `engine step over ${this.live.size} sequences`) : await call;
      this.steps++;
      this.meter.observe(engine.stats());
      return out;
    } catch (e) {
      if (e instanceof DeadlineError) this.wedge(e);
      else this.failLive(engine, e);
      return null;
    } finally {
      this.stepping = false;
    }
  }

  private deliver(out: EngineStep): void {
    for (const t of out.tokens) {
      const r = this.live.get(t.seqId);
      if (!r || r.done) continue;
      r.tokens.push(t.token);
      r.logprobs.push(t.logprob);
      r.versions.push(t.version);
      r.onToken?.({ token: t.token, logprob: t.logprob, version: t.version });
    }
    this.generatedTokens += out.tokens.length;
    for (const f of out.finished) {
      const r = this.live.get(f.seqId);
      if (!r) continue;
      this.live.delete(f.seqId);
      this.settle(r, f.stopReason);
    }
  }

  private generation(r: { tokenIds: number[]; logprobs: number[]; versions: number[] }, stopReason: Generation["stopReason"]): Generation {
    const spans = versionSpans(r.versions);
    const g: Generation = {
      tokenIds: r.tokenIds,
      logprobs: r.logprobs,
      text: this.tokenizer.decode(r.tokenIds, { skipSpecial: true }),
      stopReason,
      policyVersion: spans[0]?.version ?? this.version,
    };
    if (spans.length > 1) g.versionSpans = spans;
    return g;
  }

  private fail(r: Request, e: unknown): void {
    if (r.done) return;
    r.done = true;
    r.detach();
    r.reject(e);
  }

  /** A step that failed (not a deadline): its requests fail, the engine goes on without them. */
  private failLive(engine: InferenceEngine, e: unknown): void {
    for (const [id, r] of this.live) {
      this.fail(r, e);
      try {
        engine.cancel(id);
      } catch {
        // Already gone from the engine (it finished or failed inside the step).
      }
    }
    this.live.clear();
  }

  private wedge(e: DeadlineError): void {
    if (this.wedged) return;
    this.wedged = e;
    for (const r of [...this.live.values(), ...this.arrived.splice(0)]) this.fail(r, e);
    this.live.clear();
    this.opts.onWedged?.(e);
  }
}

/** The engine settings of a run's config (actors.inference: the evaluator's engine uses them too). */
export function engineOptionsOf(config: RunConfig): PolicyEngineOptions {
  const i = config.actors.inference;
  return {
    kvBlocks: i.kvBlocks,
    kvBlockSize: i.kvBlockSize,
    maxSeqs: i.maxSeqs,
    maxPrefillTokens: i.maxPrefillTokens,
    weightUpdate: i.weightUpdate,
    generateDeadlineMs: i.generateDeadlineMs,
  };
}

function argsKey(a: SamplingArgs): string {
  return `${a.temperature}|${a.topP}|${a.topK}|${a.maxTokens}|${(a.stop ?? []).join("\u0000")}`;
}

/**
 * What an actor does when its engine is wedged: the native call past its deadline cannot be stopped and
 * holds the model, so the process exits with an error (work it held is redelivered) for its launcher to
 * start a fresh one.
 */
export function exitWedged(ctx: { log: { error(o: object, msg: string): void }; metrics: { counter(n: string, h: string): { inc(): void } } }, e: Error): void {
  ctx.metrics.counter("deadline_expired_total", "calls that passed their deadline").inc();
  ctx.log.error({ err: e.message }, "model generation passed its deadline; exiting so a fresh process takes over");
  setTimeout(() => process.exit(1), 200);
}
