// The sampling fields /v1/completions and /v1/chat/completions share, as vLLM's CompletionRequest and
// ChatCompletionRequest name them (vllm/entrypoints/openai/completion/protocol.py and chat_completion/protocol.py:
// the OpenAI fields plus vLLM's top_k, stop_token_ids, ignore_eos, return_token_ids, return_tokens_as_token_ids,
// cache_salt). Fields this server cannot honour are refused with a 400 when set to anything but their no-op value,
// never silently ignored; fields that change nothing here (user, metadata, ...) are accepted.
import { z } from "zod";
import type { ChoiceSettings } from "./text-choices.js";

const int = z.number().int();

export const SharedFields = {
  model: z.string().nullable().optional(),
  temperature: z.number().min(0).max(2).nullable().optional(),
  top_p: z.number().gt(0).max(1).nullable().optional(),
  top_k: int.min(-1).nullable().optional(),
  n: int.min(1).max(16).nullable().optional(),
  seed: int
    .min(0)
    .max(2 ** 53 - 1)
    .nullable()
    .optional(),
  stop: z
    .union([z.string(), z.array(z.string().min(1)).max(16)])
    .nullable()
    .optional(),
  stop_token_ids: z.array(int.min(0)).nullable().optional(),
  ignore_eos: z.boolean().nullable().optional(),
  stream: z.boolean().nullable().optional(),
  stream_options: z.object({ include_usage: z.boolean().nullable().optional() }).nullable().optional(),
  return_token_ids: z.boolean().nullable().optional(),
  cache_salt: z.string().min(1).max(1024).nullable().optional(),
  presence_penalty: z.literal(0, { message: "penalties are not served (must be 0)" }).nullable().optional(),
  frequency_penalty: z.literal(0, { message: "penalties are not served (must be 0)" }).nullable().optional(),
  repetition_penalty: z.literal(1, { message: "penalties are not served (must be 1)" }).nullable().optional(),
  min_p: z.literal(0, { message: "min_p is not served (must be 0)" }).nullable().optional(),
  logit_bias: z.null({ message: "logit_bias is not served" }).optional(),
  user: z.string().nullable().optional(),
  skip_special_tokens: z.literal(true, { message: "special tokens are always skipped in text (token_ids keep them)" }).nullable().optional(),
};

type Shared = { [K in keyof typeof SharedFields]?: z.output<(typeof SharedFields)[K]> };

/** The engine settings of a request; maxTokens as the route resolved it. */
export function choiceSettings(b: Shared, maxTokens: number): ChoiceSettings {
  const stop = b.stop == null ? [] : typeof b.stop === "string" ? [b.stop] : b.stop;
  return {
    maxTokens,
    temperature: b.temperature ?? 1,
    topP: b.top_p ?? 1,
    topK: Math.max(0, b.top_k ?? 0),
    ...(b.seed == null ? {} : { seed: b.seed }),
    stop: stop.filter((s) => s.length > 0),
    stopTokenIds: b.stop_token_ids ?? [],
    ignoreEos: b.ignore_eos ?? false,
    ...(b.cache_salt == null ? {} : { cacheSalt: b.cache_salt }),
  };
}

export function usage(prompt: number, completion: number) {
  return { prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion };
}
