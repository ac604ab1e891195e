import { z } from "zod";

export type ChatRole = "system" | "user" | "assistant" | "tool";

export interface ChatMessage {
  role: ChatRole;
  content: string;
  /** Tool name for role "tool" (which tool answered). */
  name?: string;
  toolCallId?: string;
  /** The `<think>` reasoning of an assistant reply whose content had it stripped (reasoning: "strip"). Not on the
   *  Arrow wire (its tokens are: completion_ids hold every token the model sampled). */
  reasoning?: string;
}

export const chatMessageSchema = z.object({
  role: z.enum(["system", "user", "assistant", "tool"]),
  content: z.string(),
  name: z.string().optional(),
  toolCallId: z.string().optional(),
  reasoning: z.string().optional(),
});

/** The text of the last assistant message, or "" when the model never spoke. */
export function lastAssistantText(messages: readonly ChatMessage[]): string {
  for (let i = messages.length - 1; i >= 0; i--) {
    if (messages[i]!.role === "assistant") return messages[i]!.content;
  }
  return "";
}

export interface FewShotExample {
  user: string;
  assistant: string;
}

/**
 * A chat prompt: optional system prompt, few-shot pairs, then the question. Kept as a helper so every
 * environment lays few-shot turns out the same way the model saw them in SFT.
 */
export function buildPrompt(question: string, opts: { system?: string; fewShot?: readonly FewShotExample[] } = {}): ChatMessage[] {
  const out: ChatMessage[] = [];
  if (opts.system) out.push({ role: "system", content: opts.system });
  for (const ex of opts.fewShot ?? []) {
    out.push({ role: "user", content: ex.user }, { role: "assistant", content: ex.assistant });
  }
  out.push({ role: "user", content: question });
  return out;
}
