// The inference actor's batched engine: a model whose embedding is padded past its tokenizer (as real
// checkpoints' are) never yields an id the tokenizer cannot decode.
import { test } from "node:test";
import assert from "node:assert/strict";
import { PolicyModel } from "../../kernels/index.js";
import { ByteTokenizer } from "../../kernels/tokenizer.js";
import { PolicyEngine } from "../../actors/runtime/policy-engine.js";

test("a model with more vocabulary rows than its tokenizer samples only ids the tokenizer has", async () => {
  const tok = new ByteTokenizer(); // 288 ids
  const model = PolicyModel.create(
    {
      vocabSize: 416,
      hiddenSize: 32,
      intermediateSize: 64,
      numLayers: 1,
      numHeads: 2,
      numKvHeads: 1,
      maxPositionEmbeddings: 64,
      rmsNormEps: 1e-5,
      ropeTheta: 10000,
      tieWordEmbeddings: true,
      attentionBias: false,
    },
    { seed: 1, threads: 1 },
  );
  try {
    // Near-uniform logits (fresh init) at a high temperature: without the limit ~30% of draws are >= 288.
    const engine = new PolicyEngine(model, tok, 0, { seed: 3 });
    const client = engine.client(11);
    const prompt = tok.applyChatTemplate([{ role: "user", content: "hi" }], { addGenerationPrompt: true });
    const gens = await Promise.all(Array.from({ length: 16 }, () => client.generate(prompt, { maxTokens: 24, temperature: 3, topP: 1, topK: 0 })));
    const ids = gens.flatMap((g) => g.tokenIds);
    assert.ok(ids.length >= 16 * 4, `${ids.length} tokens generated`);
    assert.ok(
      ids.every((id) => id < tok.vocabSize),
      `an id past the tokenizer: ${ids.filter((id) => id >= tok.vocabSize)}`,
    );
    // And the raw model, asked the same way without the engine's limit, does draw them: the check is real.
    const [raw] = await model.generate({ prompts: [Int32Array.from(prompt)], maxNewTokens: 64, temperature: 3, seed: 5 });
    assert.ok([...raw!.tokens].some((id) => id >= tok.vocabSize));
  } finally {
    model.dispose();
  }
});
