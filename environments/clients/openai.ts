import type { Generation, ModelClient, SamplingArgs } from "../api/model.js";
import type { TokenizerLike } from "../api/tokenizer.js";

export interface OpenAIClientOptions {
  /** Server root, e.g. http://localhost:8000 or http://localhost:8000/v1. */
  baseUrl: string;
  model: string;
  /** The served model's tokenizer: prompts are sent as token ids and completions come back as ids. */
  tokenizer: TokenizerLike;
  apiKey?: string;
  /** Per request. Default 10 min. */
  timeoutMs?: number;
  /** Reported as Generation.policyVersion (an external model has no versions of ours). Default 0. */
  policyVersion?: number;
  /** Injected for tests; default global fetch. */
  fetch?: typeof fetch;
}

interface CompletionChoice {
  text?: string;
  finish_reason?: string | null;
  /** vLLM: the stop string or token id that ended generation. */
  stop_reason?: string | number | null;
  logprobs?: { tokens?: string[]; token_logprobs?: Array<number | null> } | null;
}

/**
 * A ModelClient over an OpenAI-compatible /v1/completions endpoint (vLLM, SGLang, llama.cpp server...).
 * The prompt goes out as token ids so the server continues exactly our token prefix (chat template and
 * all); logprobs=1 returns the sampled tokens' logprobs. With vLLM's return_tokens_as_token_ids the
 * tokens come back as "token_id:N" and are used as-is; otherwise the text is re-encoded with the
 * tokenizer and the logprobs are kept when their count matches (else zeros: fine for eval, not training).
 */
export class OpenAICompletionsClient implements ModelClient {
  readonly tokenizer: TokenizerLike;
  private readonly url: string;
  private readonly fetchFn: typeof fetch;

  constructor(private readonly opts: OpenAIClientOptions) {
    if (!opts.baseUrl) throw new Error("OpenAICompletionsClient: baseUrl is required");
    if (!opts.model) throw new Error("OpenAICompletionsClient: model is required");
    this.tokenizer = opts.tokenizer;
    const root = opts.baseUrl.replace(/\/+$/, "");
    this.url = `${root.endsWith("/v1") ? root : `${root}/v1`}/completions`;
    this.fetchFn = opts.fetch ?? fetch;
  }

  async generate(promptIds: number[], args: SamplingArgs, signal?: AbortSignal): Promise<Generation> {
    const body: Record<string, unknown> = {
      model: this.opts.model,
      prompt: promptIds,
      max_tokens: args.maxTokens,
      temperature: args.temperature,
      top_p: args.topP,
      logprobs: 1,
      // vLLM extensions (ignored by servers that don't know them):
      return_tokens_as_token_ids: true,
      skip_special_tokens: false,
      stop_token_ids: this.tokenizer.stopTokenIds(),
      ...(args.topK > 0 ? { top_k: args.topK } : {}),
      ...(args.stop?.length ? { stop: args.stop } : {}),
    };
    const timeout = AbortSignal.timeout(this.opts.timeoutMs ?? 600_000);
    const res = await this.fetchFn(this.url, {
      method: "POST",
      headers: { "content-type": "application/json", ...(this.opts.apiKey ? { authorization: `Bearer ${this.opts.apiKey}` } : {}) },
      body: JSON.stringify(body),
      signal: signal ? AbortSignal.any([signal, timeout]) : timeout,
    });
    const text = await res.text();
    if (!res.ok) throw new Error(`${this.url} answered ${res.status}: ${text.slice(0, 500)}`);
    let json: { choices?: CompletionChoice[] };
    try {
      json = JSON.parse(text) as { choices?: CompletionChoice[] };
    } catch {
      throw new Error(`${this.url} returned invalid JSON: ${text.slice(0, 200)}`);
    }
    const choice = json.choices?.[0];
    if (!choice) throw new Error(`${this.url} returned no choices`);
    return this.toGeneration(choice);
  }

  private toGeneration(choice: CompletionChoice): Generation {
    const tokens = choice.logprobs?.tokens ?? [];
    const lps = (choice.logprobs?.token_logprobs ?? []).map((x) => (typeof x === "number" && Number.isFinite(x) ? x : 0));
    const asIds = tokens.length > 0 && tokens.every((t) => /^token_id:\d+$/.test(t));
    const tokenIds = asIds ? tokens.map((t) => Number(t.slice("token_id:".length))) : this.tokenizer.encode(choice.text ?? "");
    const logprobs = lps.length === tokenIds.length ? lps : tokenIds.map(() => 0);
    // vLLM reports the matched stop string in stop_reason; a stop token or EOS leaves it a number or null.
    const stopReason: Generation["stopReason"] = choice.finish_reason === "length" ? "length" : typeof choice.stop_reason === "string" ? "stop" : "eos";
    // Our text convention: no special tokens, cut before a matched stop string.
    let text = asIds ? this.tokenizer.decode(tokenIds, { skipSpecial: true }) : (choice.text ?? "");
    if (typeof choice.stop_reason === "string") {
      const at = text.lastIndexOf(choice.stop_reason);
      if (at >= 0) text = text.slice(0, at);
    }
    return { tokenIds, logprobs, text, stopReason, policyVersion: this.opts.policyVersion ?? 0 };
  }
}
