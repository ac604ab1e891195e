import type { Generation, ModelClient, SamplingArgs } from "../api/model.js";
import type { TokenizerLike } from "../api/tokenizer.js";
import { abortError } from "../util/time-limit.js";

/** A reply given the decoded context so far and the call number (0-based). */
export type ScriptFn = (contextText: string, call: number) => string;

export interface ScriptedModelOptions {
  policyVersion?: number;
  /** Delay per generate call, to exercise time limits. */
  delayMs?: number;
  /** End each reply with the tokenizer's first stop token (true: like a chat model). Default true. */
  endWithStopToken?: boolean;
}

/**
 * A ModelClient that emits predetermined replies, tokenized with the given tokenizer: a test policy that
 * lets rollouts, rubrics and evals run end to end without a model. It honours maxTokens ("length"), stop
 * strings ("stop", text cut before the stop string, its tokens kept) and the abort signal, and records
 * every call's prompt ids.
 */
export class ScriptedModelClient implements ModelClient {
  /** Every call: the prefix it continued, its args and (once returned) its generation. */
  readonly calls: Array<{ promptIds: number[]; args: SamplingArgs; generation?: Generation }> = [];
  private readonly script: ScriptFn;

  constructor(
    readonly tokenizer: TokenizerLike,
    replies: readonly string[] | ScriptFn,
    private readonly opts: ScriptedModelOptions = {},
  ) {
    if (typeof replies === "function") this.script = replies;
    else {
      const list = replies.slice();
      this.script = (_ctx, call) => {
        if (call >= list.length) throw new Error(`ScriptedModelClient: no scripted reply for call ${call} (have ${list.length})`);
        return list[call]!;
      };
    }
  }

  async generate(promptIds: number[], args: SamplingArgs, signal?: AbortSignal): Promise<Generation> {
    const call = this.calls.length;
    const record: { promptIds: number[]; args: SamplingArgs; generation?: Generation } = { promptIds: promptIds.slice(), args: { ...args } };
    this.calls.push(record);
    if (this.opts.delayMs) await sleep(this.opts.delayMs, signal);
    if (signal?.aborted) throw abortError(signal);
    let text = this.script(this.tokenizer.decode(promptIds), call);
    let stopReason: Generation["stopReason"] = "eos";
    let ids: number[];
    const hit = firstStop(text, args.stop ?? []);
    if (hit) {
      ids = this.tokenizer.encode(text.slice(0, hit.end));
      text = text.slice(0, hit.start);
      stopReason = "stop";
    } else {
      ids = this.tokenizer.encode(text);
      if (this.opts.endWithStopToken !== false) ids.push(this.tokenizer.stopTokenIds()[0] ?? this.tokenizer.eosId);
    }
    if (ids.length > args.maxTokens) {
      ids = ids.slice(0, args.maxTokens);
      text = this.tokenizer.decode(ids, { skipSpecial: true });
      stopReason = "length";
    }
    // Deterministic, varied logprobs so tests can check they land on the right tokens.
    const logprobs = ids.map((_, i) => -0.01 * (((call * 7 + i) % 13) + 1));
    record.generation = { tokenIds: ids, logprobs, text, stopReason, policyVersion: this.opts.policyVersion ?? 0 };
    return record.generation;
  }
}

function firstStop(text: string, stops: readonly string[]): { start: number; end: number } | null {
  let best: { start: number; end: number } | null = null;
  for (const s of stops) {
    const i = text.indexOf(s);
    if (i >= 0 && (!best || i < best.start)) best = { start: i, end: i + s.length };
  }
  return best;
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(abortError(signal));
    const t = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(t);
      reject(abortError(signal!));
    };
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}
