import type { ChatMessage } from "./messages.js";
import type { Generation, VersionSpan } from "./model.js";
import type { RolloutResult } from "./rollout.js";
import type { TokenizerLike } from "./tokenizer.js";

/**
 * Builds one rollout's token sequence the way the model saw it: the templated prompt, then model turns
 * (mask 1, sampler logprobs) interleaved with the template tokens that close a model turn and render the
 * env/tool messages and the next generation prompt (mask 0). contextIds is always exactly what the next
 * generate call continues, so promptIds + completionIds is what the model saw — we never re-tokenize a
 * model turn, whose tokens could differ from a re-encoding of its text.
 */
export class TokenTranscript {
  readonly promptIds: number[];
  readonly messages: ChatMessage[];
  readonly promptLength: number;
  readonly completionIds: number[] = [];
  readonly completionMask: number[] = [];
  readonly samplerLogprobs: number[] = [];
  /** Completion-token offset at which each model turn starts. */
  readonly turnOffsets: number[] = [];
  /** Which policy version sampled which completion tokens (model turns only; env tokens are in none). */
  readonly versionSpans: VersionSpan[] = [];
  numTurns = 0;
  policyVersionMin = Number.POSITIVE_INFINITY;
  policyVersionMax = Number.NEGATIVE_INFINITY;
  /** The stop token that ended the last model turn, when it ended on one. */
  private lastStopToken: number | undefined;
  private readonly stopIds: Set<number>;

  /**
   * tools: the chat template's `tools` variable (templates that render the tools themselves, e.g. Qwen3's);
   * passed to every rendering, so each bridge is cut from the same conversation the prompt began.
   */
  constructor(
    private readonly tokenizer: TokenizerLike,
    prompt: readonly ChatMessage[],
    private readonly tools?: readonly Record<string, unknown>[],
  ) {
    if (prompt.length === 0) throw new Error("TokenTranscript: the prompt has no messages");
    this.messages = prompt.map((m) => ({ ...m }));
    this.promptLength = prompt.length;
    this.promptIds = this.render(this.messages, true);
    this.stopIds = new Set([...tokenizer.stopTokenIds(), tokenizer.eosId]);
  }

  /** Prompt + completion: the prefix the model continues next. */
  get contextIds(): number[] {
    return this.promptIds.concat(this.completionIds);
  }

  get lastMessage(): ChatMessage {
    return this.messages[this.messages.length - 1]!;
  }

  addModelTurn(gen: Generation): ChatMessage {
    if (gen.tokenIds.length !== gen.logprobs.length) {
      throw new Error(`model returned ${gen.tokenIds.length} tokens but ${gen.logprobs.length} logprobs`);
    }
    const offset = this.completionIds.length;
    this.turnOffsets.push(offset);
    const spans = gen.versionSpans ?? [{ version: gen.policyVersion, start: 0, end: gen.tokenIds.length }];
    for (const span of spans) {
      appendSpan(this.versionSpans, span, offset);
      this.policyVersionMin = Math.min(this.policyVersionMin, span.version);
      this.policyVersionMax = Math.max(this.policyVersionMax, span.version);
    }
    for (let i = 0; i < gen.tokenIds.length; i++) {
      this.completionIds.push(gen.tokenIds[i]!);
      this.completionMask.push(1);
      this.samplerLogprobs.push(gen.logprobs[i]!);
    }
    const last = gen.tokenIds[gen.tokenIds.length - 1];
    this.lastStopToken = last !== undefined && this.stopIds.has(last) ? last : undefined;
    this.policyVersionMin = Math.min(this.policyVersionMin, gen.policyVersion);
    this.policyVersionMax = Math.max(this.policyVersionMax, gen.policyVersion);
    this.numTurns++;
    const msg: ChatMessage = { role: "assistant", content: gen.text };
    this.messages.push(msg);
    return msg;
  }

  /**
   * Appends env/tool messages after a model turn, plus the generation prompt for the next turn, all
   * mask 0. Returns the number of tokens appended.
   */
  addEnvMessages(msgs: readonly ChatMessage[]): number {
    if (this.lastMessage.role !== "assistant") {
      throw new Error("TokenTranscript: env messages must follow a model turn");
    }
    const bridge = this.bridgeTokens(this.messages, msgs);
    if (!bridge) {
      throw new Error(
        "chat template is not prefix-stable (rendering more messages changes the tokens of earlier ones), " +
          "so env messages cannot be appended to a token sequence",
      );
    }
    for (const m of msgs) this.messages.push({ ...m });
    for (const id of bridge) {
      this.completionIds.push(id);
      this.completionMask.push(0);
      this.samplerLogprobs.push(0);
    }
    return bridge.length;
  }

  /** Appends messages to the transcript only (e.g. a final env verdict the model never reads). */
  addUnseenMessages(msgs: readonly ChatMessage[]): void {
    for (const m of msgs) this.messages.push({ ...m });
  }

  /**
   * Tokens between the end of the model's turn and the start of its next one: what closes an assistant
   * turn (minus the stop token the model already sampled), then the env messages and the generation prompt.
   * `history` ends with the assistant turn; null when the template does not render it as a prefix.
   *
   * The closer is the common tail of two renderings of the turn with different one-character replies: what
   * the template writes after any reply. (Cutting an empty reply out of the generation prompt is not enough:
   * Qwen3's template writes an empty `<think>` block before the last assistant reply, which is no closer.)
   * The env part is the rendering of history + msgs past the rendering of history; a template that renders
   * an earlier reply differently once it is no longer last (Qwen3 with an empty think block) is tried again
   * with the reply alone.
   */
  private bridgeTokens(history: readonly ChatMessage[], msgs: readonly ChatMessage[]): number[] | null {
    const before = history.slice(0, -1);
    const a = this.render([...before, { role: "assistant", content: "a" }], false);
    const b = this.render([...before, { role: "assistant", content: "b" }], false);
    let closer = commonTail(a, b);
    const envPart = this.envTokens(history, msgs) ?? this.envTokens(history.slice(-1), msgs);
    if (!envPart) return null;
    if (this.lastStopToken !== undefined && closer[0] === this.lastStopToken) closer = closer.slice(1);
    return closer.concat(envPart);
  }

  private envTokens(history: readonly ChatMessage[], msgs: readonly ChatMessage[]): number[] | null {
    return suffixAfter(this.render([...history, ...msgs], true), this.render(history.slice(), false));
  }

  private render(messages: ChatMessage[], addGenerationPrompt: boolean): number[] {
    return this.tokenizer.applyChatTemplate(messages, this.tools ? { addGenerationPrompt, tools: this.tools } : { addGenerationPrompt });
  }

  toResult(end: { stopReason: string; isTruncated: boolean; state: Record<string, unknown>; timings: { generateMs: number; envMs: number } }): RolloutResult {
    const noTurns = this.numTurns === 0;
    return {
      promptIds: this.promptIds,
      completionIds: this.completionIds,
      completionMask: this.completionMask,
      samplerLogprobs: this.samplerLogprobs,
      messages: this.messages,
      numTurns: this.numTurns,
      turnOffsets: this.turnOffsets,
      stopReason: end.stopReason,
      isTruncated: end.isTruncated,
      policyVersionMin: noTurns ? 0 : this.policyVersionMin,
      policyVersionMax: noTurns ? 0 : this.policyVersionMax,
      versionSpans: this.versionSpans,
      state: { ...end.state, promptLength: this.promptLength },
      timings: end.timings,
    };
  }
}

/** Appends `span` shifted by `offset`, merged into the last one when it continues it under the same version. */
function appendSpan(spans: VersionSpan[], span: VersionSpan, offset: number): void {
  const s = { version: span.version, start: span.start + offset, end: span.end + offset };
  if (s.end <= s.start) return;
  const last = spans[spans.length - 1];
  if (last && last.version === s.version && last.end === s.start) last.end = s.end;
  else spans.push(s);
}

function commonTail(a: readonly number[], b: readonly number[]): number[] {
  let n = 0;
  while (n < a.length && n < b.length && a[a.length - 1 - n] === b[b.length - 1 - n]) n++;
  return a.slice(a.length - n);
}

function suffixAfter(full: readonly number[], prefix: readonly number[]): number[] | null {
  if (full.length < prefix.length) return null;
  for (let i = 0; i < prefix.length; i++) if (full[i] !== prefix[i]) return null;
  return full.slice(prefix.length);
}
