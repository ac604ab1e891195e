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
import { type Admission, groupWaiting, nextGroup, type Standing } from "./engine-admission.js";
import { EngineMeter } from "./engine-meter.js";
import { type EngineSizing, engineSizing } from "./engine-sizing.js";
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
  /** Which waiting request runs next when the batch is full: see engine-admission.ts (default fair). */
  admission?: Admission;
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
  /**
   * The k most likely tokens of each step (0..20), by the model's own distribution (log_softmax of the raw logits,
   * as vLLM's default raw_logprobs; at temperature 1 without top-k/top-p the sampled token's logprob is the same).
   */
  topLogprobs?: number;
  /** Each token as it is sampled (streaming). */
  onToken?(t: { token: number; logprob: number; version: number; top?: TopLogprob[] }): void;
}

/** One of the k most likely tokens at a step. */
export interface TopLogprob {
  token: number;
  logprob: number;
}

/** What submit() resolves with: every sampled token, its logprob and the weights version it was sampled under. */
export interface SubmitResult {
  tokenIds: number[];
  logprobs: number[];
  versions: number[];
  /** abort: ended early by pause("abort") or abortAll(), with the tokens it had. */
  finish: StopReason | "abort";
  /** Per token, the k most likely tokens (topLogprobs k > 0). */
  topLogprobs?: TopLogprob[][];
}

interface Request {
  prompt: Int32Array;
  /** Requests with equal keys arriving together become one engine request. */
  key: string;
  /** The client that asked (one per task): admission is fair between owners. */
  owner: number;
  args: SamplingArgs;
  seed: number;
  stopTokenIds: readonly number[] | undefined;
  ignoreEos: boolean;
  cacheSalt: bigint | undefined;
  onToken: SubmitOptions["onToken"];
  topLogprobs: number;
  tops: TopLogprob[][];
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
  private owners = 0;
  /** Owners with requests waiting or in the engine: their standing for fair admission, and requests waiting. */
  private standings = new Map<number, Standing & { waiting: number }>();
  private admissions = 0;
  private readonly sizing: EngineSizing;
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
    this.sizing = engineSizing(model.config, opts);
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
    const queued = this.arrived.splice(0);
    this.unqueue(queued);
    for (const r of queued) n += this.settle(r, "abort") ? 1 : 0;
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
    // Each served request is its own client for fair admission.
    return this.enqueue(promptIds, o.args, this.owners++, o.seed, o.signal, o);
  }

  /** A client for one task (or one evaluated rollout): the engine's admission is fair between clients. */
  client(seedBase?: number): ModelClient {
    let local = 0;
    const owner = this.owners++;
    return {
      tokenizer: this.tokenizer,
      generate: async (promptIds, args, signal) => {
        const out = await this.enqueue(promptIds, args, owner, seedBase === undefined ? undefined : (seedBase + local++) >>> 0, signal);
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
    // What the loop did not get to cancel goes with the engine.
    this.live.clear();
    this.standings.clear();
    this.toCancel.length = 0;
    const engine = this.engine;
    this.engine = null;
    // A wedged engine's step never ended: its native engine stays with the process.
    if (engine && !this.wedged) engine.dispose();
  }

  private enqueue(
    promptIds: readonly number[],
    args: SamplingArgs,
    owner: number,
    seed: number | undefined,
    signal?: AbortSignal,
    o: Partial<SubmitOptions> = {},
  ): Promise<SubmitResult> {
    if (signal?.aborted) return Promise.reject(new Error("generation aborted"));
    if (this.wedged) return Promise.reject(this.wedged);
    const ctxLen = this.model.config.maxPositionEmbeddings;
    const prompt = Int32Array.from(promptIds.length >= ctxLen ? promptIds.slice(-(ctxLen - 1)) : promptIds);
    const extra = `${o.ignoreEos ? "!" : ""}${(o.stopTokenIds ?? []).join(",")}|${o.cacheSalt ?? ""}|${o.topLogprobs ?? 0}`;
    return new Promise<SubmitResult>((resolve, reject) => {
      const r: Request = {
        prompt,
        key: `${argsKey(args)}|${extra}#${prompt.join(",")}`,
        owner,
        args,
        seed: seed ?? ((this.opts.seed ?? 0) + this.counter++) >>> 0,
        stopTokenIds: o.stopTokenIds,
        ignoreEos: o.ignoreEos === true,
        cacheSalt: o.cacheSalt,
        onToken: o.onToken,
        topLogprobs: Math.max(0, Math.min(20, o.topLogprobs ?? 0)),
        tops: [],
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
      this.standingOf(owner).waiting++;
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
    if (i >= 0) this.unqueue(this.arrived.splice(i, 1));
    else if (this.live.get(r.seqId) === r && !r.done)
      this.toCancel.push(r.seqId); // leaves `live` at the step boundary
    else return;
    this.fail(r, new Error("generation aborted"));
  }

  /** Resolves `r` with what it has; false when it had already ended. */
  private settle(r: Request, finish: SubmitResult["finish"]): boolean {
    if (r.done) return false;
    r.done = true;
    r.detach();
    const tops = r.topLogprobs > 0 ? { topLogprobs: r.tops.slice() } : {};
    r.resolve({ tokenIds: r.tokens.slice(), logprobs: r.logprobs.slice(), versions: r.versions.slice(), finish, ...tops });
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
      const r = this.live.get(id);
      if (!r) continue;
      this.leave(r);
      this.engine!.cancel(id);
    }
    if (this.pendingWeights && this.weightsDue()) this.applyPendingWeights(false);
    // Barrier: nothing new starts on weights about to be replaced.
    if (this.pendingWeights && this.opts.weightUpdate === "barrier") return;
    if (this.arrived.length > 0 && this.pauseState === "running") this.admit();
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

  /**
   * Hands waiting requests to the engine while it has sequences to spare, in the admission policy's order; those
   * with the same prompt and arguments go as one group. An idle engine always takes the next group.
   */
  private admit(): void {
    let engine: InferenceEngine;
    try {
      engine = this.engine ?? this.createEngine();
    } catch (e) {
      const all = this.arrived.splice(0);
      this.unqueue(all);
      for (const r of all) this.fail(r, e);
      return;
    }
    const groups = groupWaiting(this.arrived, this.sizing.maxSeqs);
    const admitted = new Set<Request>();
    const standing = (owner: number) => this.standingOf(owner);
    const policy = this.opts.admission ?? "fair";
    for (let i = nextGroup(groups, standing, policy); i >= 0; i = nextGroup(groups, standing, policy)) {
      const group = groups[i]!;
      if (this.live.size > 0 && this.live.size + group.length > this.sizing.maxSeqs) break;
      groups.splice(i, 1);
      for (const r of group) admitted.add(r);
      this.addGroup(engine, group);
    }
    this.arrived = this.arrived.filter((r) => !admitted.has(r));
  }

  private addGroup(engine: InferenceEngine, group: Request[]): void {
    const s = this.standingOf(group[0]!.owner);
    s.lastAdmitted = this.admissions++;
    try {
      const ids = engine.add(this.engineRequest(group));
      group.forEach((r, i) => {
        r.seqId = ids[i]!;
        this.live.set(r.seqId, r);
        const o = this.standingOf(r.owner);
        o.waiting--;
        o.inFlight++;
      });
    } catch (e) {
      this.unqueue(group);
      for (const r of group) this.fail(r, e);
    }
  }

  private standingOf(owner: number): Standing & { waiting: number } {
    let s = this.standings.get(owner);
    if (!s) this.standings.set(owner, (s = { inFlight: 0, lastAdmitted: -1, waiting: 0 }));
    return s;
  }

  /** Waiting requests that will not be admitted (aborted, failed). */
  private unqueue(requests: Request[]): void {
    for (const r of requests) {
      const s = this.standingOf(r.owner);
      s.waiting--;
      this.forgetIdle(r.owner, s);
    }
  }

  /** r is no longer in the engine. */
  private leave(r: Request): void {
    this.live.delete(r.seqId);
    const s = this.standingOf(r.owner);
    s.inFlight--;
    this.forgetIdle(r.owner, s);
  }

  /** An owner with nothing waiting or running is forgotten (one per task: the map must not grow with the run). */
  private forgetIdle(owner: number, s: Standing & { waiting: number }): void {
    if (s.waiting <= 0 && s.inFlight <= 0) this.standings.delete(owner);
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
    const s = this.sizing;
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
      // Logits rows come back only while a request asks for top logprobs (they cost a copy of [tokens, vocab]).
      let returnLogits = false;
      for (const r of this.live.values()) if (r.topLogprobs > 0 && !r.done) returnLogits = true;
      const call = engine.step({ returnLogits });
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
    const vocab = out.logits && out.tokens.length ? out.logits.length / out.tokens.length : 0;
    out.tokens.forEach((t, i) => {
      const r = this.live.get(t.seqId);
      if (!r || r.done) return;
      r.tokens.push(t.token);
      r.logprobs.push(t.logprob);
      r.versions.push(t.version);
      const top = r.topLogprobs > 0 && out.logits ? topLogprobsOf(out.logits.subarray(i * vocab, (i + 1) * vocab), r.topLogprobs) : undefined;
      if (top) r.tops.push(top);
      r.onToken?.({ token: t.token, logprob: t.logprob, version: t.version, ...(top ? { top } : {}) });
    });
    this.generatedTokens += out.tokens.length;
    for (const f of out.finished) {
      const r = this.live.get(f.seqId);
      if (!r) continue;
      this.leave(r);
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
    for (const [id, r] of [...this.live]) {
      this.leave(r);
      this.fail(r, e);
      try {
        engine.cancel(id);
      } catch {
        // Already gone from the engine (it finished or failed inside the step).
      }
    }
  }

  private wedge(e: DeadlineError): void {
    if (this.wedged) return;
    this.wedged = e;
    for (const r of [...this.live.values(), ...this.arrived.splice(0)]) this.fail(r, e);
    this.live.clear();
    this.standings.clear();
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
    admission: i.admission,
    generateDeadlineMs: i.generateDeadlineMs,
  };
}

/** The k largest entries of log_softmax(row), most likely first (ties: lower id first). */
export function topLogprobsOf(row: Float32Array, k: number): TopLogprob[] {
  let max = Number.NEGATIVE_INFINITY;
  for (const z of row) if (z > max) max = z;
  let sum = 0;
  for (const z of row) sum += Math.exp(z - max);
  const lse = max + Math.log(sum);
  const best: number[] = [];
  for (let id = 0; id < row.length; id++) {
    if (best.length === k && row[id]! <= row[best[k - 1]!]!) continue;
    let at = best.length;
    while (at > 0 && row[best[at - 1]!]! < row[id]!) at--;
    best.splice(at, 0, id);
    if (best.length > k) best.pop();
  }
  return best.map((token) => ({ token, logprob: row[token]! - lse }));
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
