// The learner's side of the token view: each completion token's logprob under a policy version's weights,
// recomputed on demand with our own kernels (one forward pass) so the page can shade each token by the gap
// to the sampler's logprob — where the importance ratio, and so the loss's masking, comes from. One model
// is kept, loaded with the last version asked for; requests run one at a time (a forward pass uses the
// kernel threads, and a dashboard must not compete with the run for more).
import type { RunConfig } from "../../actors/runtime/config.js";
import { createPolicyModel, modelConfigOf } from "../../actors/runtime/model-factory.js";
import type { PolicyModel } from "../../kernels/index.js";
import type { WeightsChannel } from "../../streams/index.js";

export interface LearnerLogprobs {
  version: number;
  /** One per completion token: log p(token | prefix) under that version (null for a first token with no prefix). */
  logprobs: (number | null)[];
}

export class LearnerLogprobCalculator {
  private model: PolicyModel | null = null;
  private loaded = -1;
  private queue: Promise<unknown> = Promise.resolve();

  constructor(
    private readonly config: RunConfig,
    private readonly weights: WeightsChannel,
  ) {}

  compute(version: number, promptIds: Int32Array, completionIds: Int32Array): Promise<LearnerLogprobs> {
    const run = this.queue.then(() => this.run(version, promptIds, completionIds));
    this.queue = run.catch(() => undefined);
    return run;
  }

  private async run(version: number, promptIds: Int32Array, completionIds: Int32Array): Promise<LearnerLogprobs> {
    const ctx = modelConfigOf(this.config).maxPositionEmbeddings;
    const T = promptIds.length + completionIds.length;
    if (completionIds.length === 0) return { version, logprobs: [] };
    if (T > ctx) throw new Error(`the sequence has ${T} tokens, past the model's context of ${ctx}`);
    if (this.loaded !== version) {
      let bytes: Uint8Array;
      try {
        bytes = await this.weights.fetch(version, 30_000);
      } catch (e) {
        throw new Error(`weights v${version} cannot be read (${(e as Error).message.split("\n")[0]}); the run keeps only its newest versions`);
      }
      this.model ??= createPolicyModel(this.config, { threads: 1 });
      this.model.loadSafetensors(bytes);
      this.loaded = version;
    }
    const tokens = new Int32Array(T);
    tokens.set(promptIds, 0);
    tokens.set(completionIds, promptIds.length);
    const logits = await this.model!.forward({ tokens, segmentStarts: new Int32Array([0]) });
    const vocab = logits.length / T;
    const out: (number | null)[] = [];
    for (let i = 0; i < completionIds.length; i++) {
      if (promptIds.length + i === 0) {
        out.push(null);
        continue;
      }
      // Row t holds the distribution of token t + 1.
      const row = logits.subarray((promptIds.length + i - 1) * vocab, (promptIds.length + i) * vocab);
      let max = -Infinity;
      for (const x of row) if (x > max) max = x;
      let sum = 0;
      for (const x of row) sum += Math.exp(x - max);
      out.push(row[completionIds[i]!]! - max - Math.log(sum));
    }
    return { version, logprobs: out };
  }

  dispose(): void {
    this.model?.dispose();
    this.model = null;
  }
}
