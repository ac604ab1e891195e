// serve/'s TokenEngine (serve/token-engine.ts) over one rollout's ModelClient: the request's token ids continued
// under the sampling its task fixed (a request may ask for fewer tokens, never for another distribution: the
// importance ratio needs the sampler's own), every token labelled with the policy version that sampled it (the
// route answers them as weight_versions spans), and the call recorded for the rollout's trace check.
import type { EndpointCall, Generation, ModelClient, SamplingArgs } from "../../../environments/api/index.js";
import type { TokenRequest, TokenResult } from "../../../serve/token-engine.js";

export interface EndpointSessionState {
  model: ModelClient;
  sampling: SamplingArgs;
  calls: EndpointCall[];
}

export async function generateForSession(s: EndpointSessionState, req: TokenRequest): Promise<TokenResult> {
  const maxTokens = Math.min(req.maxTokens, s.sampling.maxTokens);
  const t0 = performance.now();
  const gen = await s.model.generate(req.promptIds, { ...s.sampling, maxTokens }, req.signal);
  s.calls.push({ promptIds: req.promptIds.slice(), generation: gen, ms: performance.now() - t0 });
  return {
    tokenIds: gen.tokenIds,
    logprobs: gen.logprobs,
    versions: versionLabels(gen),
    finish: gen.stopReason === "eos" || gen.stopReason === "stop" ? "stop" : "length",
  };
}

function versionLabels(gen: Generation): string[] {
  const out = new Array<string>(gen.tokenIds.length).fill(String(gen.policyVersion));
  for (const span of gen.versionSpans ?? []) for (let i = span.start; i < span.end; i++) out[i] = String(span.version);
  return out;
}
