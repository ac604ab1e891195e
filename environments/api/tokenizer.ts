import type { ChatMessage } from "./messages.js";

/**
 * The tokenizer surface an environment needs. The runtime passes the policy's own tokenizer so that the
 * token sequences an environment builds are exactly the ones the model sees and the learner trains on.
 */
export interface TokenizerLike {
  readonly vocabSize: number;
  readonly eosId: number;
  encode(text: string): number[];
  decode(ids: ArrayLike<number>, opts?: { skipSpecial?: boolean }): string;
  /**
   * Renders a conversation with the model's chat template; addGenerationPrompt appends the assistant header.
   * tools: the template's `tools` variable (OpenAI function schemas), for templates that render tools.
   */
  applyChatTemplate(messages: ChatMessage[], opts?: { addGenerationPrompt?: boolean; tools?: readonly Record<string, unknown>[] }): number[];
  /** The tool-call format the chat template speaks ("hermes": Qwen's <tool_call>); absent: none. */
  readonly toolCallFormat?: "hermes";
  /** Token ids that end an assistant turn (EOS, end-of-turn markers). */
  stopTokenIds(): number[];
}
