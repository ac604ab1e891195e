import type { ChatMessage } from "./messages.js";

export interface ParseResult {
  /** The extracted answer, or null when the reply holds none. */
  answer: string | null;
  /** Why answer is null (recorded in the score's errors, so unparseable output is explained). */
  reason?: string;
}

/**
 * Extracts answers from model replies and judges their format. Subclasses implement the two text
 * methods; the completion-level methods look at assistant messages only, so env/tool text never counts.
 */
export abstract class Parser {
  abstract readonly name: string;
  /** Extract the answer from one reply. */
  abstract parseText(text: string): ParseResult;
  /** 1 when one reply follows the expected format exactly, 0 when not (values in between allowed). */
  abstract formatScore(text: string): number;

  /** Parse the last assistant message of a completion (or a plain reply string). */
  parse(completion: string | readonly ChatMessage[]): ParseResult {
    if (typeof completion === "string") return this.parseText(completion);
    const replies = completion.filter((m) => m.role === "assistant");
    if (replies.length === 0) return { answer: null, reason: "no assistant message" };
    return this.parseText(replies[replies.length - 1]!.content);
  }

  parseAnswer(completion: string | readonly ChatMessage[]): string | null {
    return this.parse(completion).answer;
  }

  /** Mean format score over the assistant messages: a format reward in [0, 1]. */
  formatReward(completion: string | readonly ChatMessage[]): number {
    if (typeof completion === "string") return this.formatScore(completion);
    const replies = completion.filter((m) => m.role === "assistant");
    if (replies.length === 0) return 0;
    let sum = 0;
    for (const m of replies) sum += this.formatScore(m.content);
    return sum / replies.length;
  }
}

/** The whole reply, trimmed, is the answer. */
export class PlainParser extends Parser {
  readonly name: string = "plain";
  parseText(text: string): ParseResult {
    const t = text.trim();
    return t ? { answer: t } : { answer: null, reason: "empty reply" };
  }
  formatScore(text: string): number {
    return text.trim() ? 1 : 0;
  }
}
