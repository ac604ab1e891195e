// The baseline of `rollstream bench inference`: the static batching the inference actor used before issue 44, kept
// here only to be measured against. Requests queue; a batch of up to maxBatch requests with equal sampling arguments
// runs as one model.generate call (the batch API) and every request in it waits for the longest; requests that
// arrive meanwhile wait for the whole batch. Each request prefills its whole prompt (a group's shared prompt G times,
// a multi-turn conversation again at every turn).
import type { PolicyModel } from "../kernels/index.js";
import type { Tokenizer } from "../kernels/tokenizer.js";
import type { Generation, ModelClient, SamplingArgs } from "../environments/api/index.js";

interface Pending {
  promptIds: number[];
  args: SamplingArgs;
  seed: number;
  resolve(g: Generation): void;
  reject(e: unknown): void;
}

export class StaticBatcher {
  private queue: Pending[] = [];
  private running = false;
  /** Prompt tokens handed to the model: what it prefilled. */
  promptTokens = 0;

  constructor(
    private readonly model: PolicyModel,
    readonly tokenizer: Tokenizer,
    private readonly maxBatch = 64,
  ) {}

  client(seedBase: number): ModelClient {
    let local = 0;
    return { tokenizer: this.tokenizer, generate: (promptIds, args) => this.enqueue(promptIds, args, (seedBase + local++) >>> 0) };
  }

  private enqueue(promptIds: number[], args: SamplingArgs, seed: number): Promise<Generation> {
    return new Promise<Generation>((resolve, reject) => {
      this.queue.push({ promptIds, args, seed, resolve, reject });
      if (!this.running) setImmediate(() => void this.pump());
    });
  }

  private async pump(): Promise<void> {
    if (this.running) return;
    this.running = true;
    try {
      while (this.queue.length > 0) {
        const key = argsKey(this.queue[0]!.args);
        const batch: Pending[] = [];
        const rest: Pending[] = [];
        for (const p of this.queue) (batch.length < this.maxBatch && argsKey(p.args) === key ? batch : rest).push(p);
        this.queue = rest;
        await this.runBatch(batch);
      }
    } finally {
      this.running = false;
    }
  }

  private async runBatch(batch: Pending[]): Promise<void> {
    const args = batch[0]!.args;
    const ctxLen = this.model.config.maxPositionEmbeddings;
    const prompts = batch.map((p) => Int32Array.from(p.promptIds.length >= ctxLen ? p.promptIds.slice(-(ctxLen - 1)) : p.promptIds));
    this.promptTokens += prompts.reduce((n, p) => n + p.length, 0);
    try {
      const results = await this.model.generate({
        prompts,
        maxNewTokens: args.maxTokens,
        temperature: args.temperature,
        topP: args.topP,
        topK: args.topK,
        seeds: batch.map((p) => p.seed),
        eosTokenId: this.tokenizer.stopTokenIds(),
      });
      results.forEach((r, i) => {
        const tokenIds = Array.from(r.tokens);
        batch[i]!.resolve({
          tokenIds,
          logprobs: Array.from(r.logprobs),
          text: this.tokenizer.decode(tokenIds, { skipSpecial: true }),
          stopReason: r.stopReason,
          policyVersion: 0,
        });
      });
    } catch (e) {
      for (const p of batch) p.reject(e);
    }
  }
}

function argsKey(a: SamplingArgs): string {
  return `${a.temperature}|${a.topP}|${a.topK}|${a.maxTokens}|${(a.stop ?? []).join("\u0000")}`;
}
