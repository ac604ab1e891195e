// Serves generate() calls from environments by batching them into the kernels' ragged KV-cache
// decoder. Environments run one rollout per call; batching across rollouts and tasks happens here.
// New weights are swapped in between batches, so one generation never mixes two policies.
import type { PolicyModel } from "../../kernels/index.js";
import type { Tokenizer } from "../../kernels/tokenizer.js";
import type { Generation, ModelClient, SamplingArgs } from "../../environments/api/index.js";
import { DeadlineError, withDeadline } from "../../streams/index.js";

interface Pending {
  promptIds: number[];
  args: SamplingArgs;
  seed: number;
  resolve(g: Generation): void;
  reject(e: unknown): void;
}

export interface PolicyEngineOptions {
  /** Largest number of sequences decoded together. */
  maxBatch?: number;
  /** Base seed; each request gets seed + a counter unless given one. */
  seed?: number;
  /**
   * A batch that takes longer fails every request in it with a DeadlineError, and the engine refuses all
   * later ones: the native call cannot be interrupted, so an engine past its deadline is wedged and its
   * actor should exit (onWedged) for its launcher to start a fresh one.
   */
  generateDeadlineMs?: number;
  onWedged?: (e: DeadlineError) => void;
}

export class PolicyEngine {
  private queue: Pending[] = [];
  private running = false;
  private pendingWeights: { version: number; bytes: Uint8Array } | null = null;
  private counter = 0;
  version: number;
  generatedTokens = 0;
  /** Set once a batch passed its deadline: every later request fails with it. */
  wedged: DeadlineError | null = null;

  constructor(
    private model: PolicyModel,
    readonly tokenizer: Tokenizer,
    version: number,
    private readonly opts: PolicyEngineOptions = {},
  ) {
    this.version = version;
  }

  /**
   * Weights for `version` are applied before the next batch starts. Normally versions only go up; a
   * learner restored from an older checkpoint rolls them back, and `rollback` follows it there.
   */
  swapWeights(version: number, safetensors: Uint8Array, rollback = false): void {
    if (!rollback && version <= this.version) return;
    if (!rollback && this.pendingWeights && this.pendingWeights.version >= version) return;
    this.pendingWeights = { version, bytes: safetensors };
    if (!this.running) this.applyPendingWeights();
  }

  client(seedBase?: number): ModelClient {
    let local = 0;
    return {
      tokenizer: this.tokenizer,
      generate: (promptIds, args, signal) => this.enqueue(promptIds, args, seedBase === undefined ? undefined : (seedBase + local++) >>> 0, signal),
    };
  }

  private enqueue(promptIds: number[], args: SamplingArgs, seed: number | undefined, signal?: AbortSignal): Promise<Generation> {
    if (signal?.aborted) return Promise.reject(new Error("generation aborted"));
    if (this.wedged) return Promise.reject(this.wedged);
    return new Promise<Generation>((resolve, reject) => {
      this.queue.push({ promptIds, args, seed: seed ?? ((this.opts.seed ?? 0) + this.counter++) >>> 0, resolve, reject });
      // Let every rollout that is about to ask join this batch.
      if (!this.running) setImmediate(() => void this.pump());
    });
  }

  private applyPendingWeights(): void {
    if (!this.pendingWeights) return;
    this.model.loadSafetensors(this.pendingWeights.bytes);
    this.version = this.pendingWeights.version;
    this.pendingWeights = null;
  }

  private async pump(): Promise<void> {
    if (this.running) return;
    this.running = true;
    try {
      while (this.queue.length > 0) {
        this.applyPendingWeights();
        const key = argsKey(this.queue[0]!.args);
        const batch: Pending[] = [];
        const rest: Pending[] = [];
        for (const p of this.queue) {
          if (batch.length < (this.opts.maxBatch ?? 64) && argsKey(p.args) === key) batch.push(p);
          else rest.push(p);
        }
        this.queue = rest;
        await this.runBatch(batch);
      }
    } finally {
      this.running = false;
    }
  }

  private async runBatch(batch: Pending[]): Promise<void> {
    const args = batch[0]!.args;
    const version = this.version;
    const ctxLen = this.model.config.maxPositionEmbeddings;
    const stopSequences = (args.stop ?? []).map((s) => Int32Array.from(this.tokenizer.encode(s)));
    try {
      const call = this.model.generate({
        prompts: batch.map((p) => Int32Array.from(p.promptIds.length >= ctxLen ? p.promptIds.slice(-(ctxLen - 1)) : p.promptIds)),
        maxNewTokens: args.maxTokens,
        temperature: args.temperature,
        topP: args.topP,
        topK: args.topK,
        seed: batch[0]!.seed,
        seeds: batch.map((p) => p.seed),
        eosTokenId: this.tokenizer.stopTokenIds(),
        stopSequences: stopSequences.length ? stopSequences : undefined,
        // A checkpoint's embedding may be padded past its tokenizer (Qwen's is): never draw an id it cannot decode.
        vocabLimit: this.tokenizer.vocabSize < this.model.config.vocabSize ? this.tokenizer.vocabSize : undefined,
      });
      const deadline = this.opts.generateDeadlineMs;
      const results = deadline ? await withDeadline(call, deadline, `generation of ${batch.length} sequences`) : await call;
      results.forEach((r, i) => {
        const tokenIds = Array.from(r.tokens);
        this.generatedTokens += tokenIds.length;
        batch[i]!.resolve({
          tokenIds,
          logprobs: Array.from(r.logprobs),
          text: this.tokenizer.decode(tokenIds, { skipSpecial: true }),
          stopReason: r.stopReason,
          policyVersion: version,
        });
      });
    } catch (e) {
      if (e instanceof DeadlineError && !this.wedged) {
        this.wedged = e;
        for (const p of this.queue.splice(0)) p.reject(e);
        this.opts.onWedged?.(e);
      }
      for (const p of batch) p.reject(e);
    }
  }
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
