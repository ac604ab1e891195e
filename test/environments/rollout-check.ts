import assert from "node:assert/strict";
import type { RolloutResult } from "../../environments/api/index.js";
import type { ScriptedModelClient } from "../../environments/testing/index.js";

/**
 * The token invariants of a rollout made against a scripted model: every generate call continued a prefix
 * of promptIds + completionIds, the tokens it returned follow that prefix with mask 1 and their sampler
 * logprobs, and every other completion token has mask 0 and logprob 0.
 */
export function checkTokens(r: RolloutResult, model: ScriptedModelClient): void {
  const seq = [...r.promptIds, ...r.completionIds];
  assert.equal(r.completionIds.length, r.completionMask.length);
  assert.equal(r.completionIds.length, r.samplerLogprobs.length);
  const mask = new Array<number>(r.completionIds.length).fill(0);
  const logprobs = new Array<number>(r.completionIds.length).fill(0);
  for (const [k, call] of model.calls.entries()) {
    const gen = call.generation;
    if (!gen) continue; // aborted call
    assert.deepEqual(seq.slice(0, call.promptIds.length), call.promptIds, `call ${k} continued a prefix of the final sequence`);
    const at = call.promptIds.length;
    assert.deepEqual(seq.slice(at, at + gen.tokenIds.length), gen.tokenIds, `call ${k}'s tokens follow its prefix`);
    for (let i = 0; i < gen.tokenIds.length; i++) {
      mask[at - r.promptIds.length + i] = 1;
      logprobs[at - r.promptIds.length + i] = gen.logprobs[i]!;
    }
  }
  assert.deepEqual(r.completionMask, mask, "mask 1 exactly on model-generated tokens");
  assert.deepEqual(r.samplerLogprobs, logprobs, "sampler logprobs on model tokens, 0 elsewhere");
}
