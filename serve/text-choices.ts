// What the OpenAI routes (/v1/completions, /v1/chat/completions) share: n choices of one prompt run through the
// token engine (the same prompt and settings arriving together share one prefill; choice i gets seed + i), each
// decoded to text without special tokens and cut before a matched stop string, as vLLM does (token_ids keep
// every sampled token); and the text deltas of a stream, held back while they could still become a stop string or
// end in half a UTF-8 character.
import { randomUUID } from "node:crypto";
import type { Tokenizer } from "../kernels/tokenizer.js";
import type { TokenEngine, TokenRequest, TokenResult } from "./token-engine.js";

export interface TextChoice extends TokenResult {
  text: string;
  /** OpenAI finish_reason: stop (a stop id or string, EOS), length, or abort. */
  finishReason: "stop" | "length" | "abort";
  /** vLLM stop_reason: the stop string or extra stop id that ended it; null for EOS or length. */
  stopReason: string | number | null;
}

export interface ChoiceSettings {
  maxTokens: number;
  temperature: number;
  topP: number;
  topK: number;
  seed?: number;
  stop: string[];
  stopTokenIds: number[];
  ignoreEos: boolean;
  cacheSalt?: string;
  /** The k most likely tokens per step (OpenAI top_logprobs / legacy logprobs: k). */
  topLogprobs?: number;
}

/** Why a finished output stopped, and its text without special tokens and without the stop string. */
export function textChoice(tok: Tokenizer, r: TokenResult, s: Pick<ChoiceSettings, "stop" | "stopTokenIds">): TextChoice {
  let text = tok.decode(r.tokenIds, { skipSpecial: true });
  let stopReason: string | number | null = null;
  if (r.finish === "stop") {
    const last = r.tokenIds[r.tokenIds.length - 1];
    const matched = s.stop.find((x) => text.endsWith(x));
    if (matched !== undefined && !tok.stopTokenIds().includes(last!)) {
      text = text.slice(0, text.length - matched.length);
      stopReason = matched;
    } else if (last !== undefined && s.stopTokenIds.includes(last)) stopReason = last;
  }
  return { ...r, text, finishReason: r.finish, stopReason };
}

/** n generations of `promptIds`, started together so they share the prompt's prefill. */
export function runChoices(
  engine: TokenEngine,
  tok: Tokenizer,
  promptIds: number[],
  n: number,
  s: ChoiceSettings,
  signal: AbortSignal,
  onToken?: (i: number, t: Parameters<NonNullable<TokenRequest["onToken"]>>[0]) => void,
): Promise<TextChoice[]> {
  const base = randomUUID();
  return Promise.all(
    Array.from({ length: n }, async (_, i) => {
      const r = await engine.generate({
        requestId: `${base}-${i}`,
        promptIds,
        maxTokens: s.maxTokens,
        temperature: s.temperature,
        topP: s.topP,
        topK: s.topK,
        ...(s.seed === undefined ? {} : { seed: s.seed + i }),
        stopTokenIds: s.stopTokenIds,
        ignoreEos: s.ignoreEos,
        stop: s.stop,
        ...(s.cacheSalt === undefined ? {} : { cacheSalt: s.cacheSalt }),
        ...(s.topLogprobs ? { topLogprobs: s.topLogprobs } : {}),
        signal,
        ...(onToken ? { onToken: (t) => onToken(i, t) } : {}),
      });
      return textChoice(tok, r, s);
    }),
  );
}

/** Text deltas of one streamed choice: what is safe to show after each token, and the rest at the end. */
export class TextDeltas {
  private ids: number[] = [];
  private shown = 0;
  private readonly holdBack: number;

  /** cutAt: nothing from its first occurrence on is shown (a tool call's opening tag: the call is sent parsed). */
  constructor(
    private readonly tok: Tokenizer,
    stop: readonly string[],
    private readonly cutAt?: string,
  ) {
    // A stop string must never be shown (it is cut from the final text), and the token that completes one arrives
    // here before the engine says the request stopped: the last max-stop-length characters wait for the next token.
    this.holdBack = Math.max(0, ...stop.map((x) => x.length), cutAt?.length ?? 0);
  }

  push(tokenId: number): string {
    this.ids.push(tokenId);
    let text = this.tok.decode(this.ids, { skipSpecial: true });
    // Half a multi-byte character decodes to U+FFFD until its last byte arrives.
    while (text.endsWith("\uFFFD")) text = text.slice(0, -1);
    const cut = this.cutAt ? text.indexOf(this.cutAt) : -1;
    if (cut >= 0) text = text.slice(0, cut);
    const safe = Math.max(this.shown, cut >= 0 ? text.length : text.length - this.holdBack);
    const delta = text.slice(this.shown, safe);
    this.shown = safe;
    return delta;
  }

  /** The rest of the final text (the choice's text, stop string already cut). */
  finish(finalText: string): string {
    const delta = finalText.slice(this.shown);
    this.shown = Math.max(this.shown, finalText.length);
    return delta;
  }
}
