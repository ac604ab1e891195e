// POST /v1/completions as vLLM serves it (vllm/entrypoints/openai/completion/protocol.py CompletionRequest,
// CompletionResponse, CompletionStreamResponse, CompletionLogProbs): a prompt as text, token ids, or a list of
// either; n choices each; logprobs {tokens, token_logprobs, top_logprobs, text_offset} (tokens as "token_id:N" with
// return_tokens_as_token_ids); return_token_ids puts prompt_token_ids and token_ids on each choice; stream: SSE.
// top_logprobs: per token {token: logprob} of the `logprobs` k most likely tokens (the model's own distribution,
// log_softmax of the raw logits, as vLLM's default raw_logprobs) and the sampled one; logprobs 0: the sampled one only.
import { randomUUID } from "node:crypto";
import type { FastifyInstance, FastifyReply } from "fastify";
import { z } from "zod";
import type { Tokenizer } from "../kernels/tokenizer.js";
import { BadRequest, parseWith } from "./http-errors.js";
import { choiceSettings, SharedFields, usage } from "./openai-fields.js";
import { callerGone, SseStream } from "./sse.js";
import { runChoices, type TextChoice, TextDeltas } from "./text-choices.js";
import type { TokenEngine } from "./token-engine.js";
import { checkPrompt } from "./vllm-generate-route.js";

const int = z.number().int();
const ids = z.array(int.min(0)).min(1);

export const CompletionRequest = z.object({
  ...SharedFields,
  prompt: z.union([z.string(), ids, z.array(z.string()).min(1), z.array(ids).min(1)]),
  max_tokens: int.min(1).nullable().optional(),
  logprobs: int.min(0).max(20).nullable().optional(),
  echo: z.literal(false, { message: "echo is not served" }).nullable().optional(),
  best_of: z.literal(1, { message: "best_of is not served" }).nullable().optional(),
  suffix: z.null({ message: "suffix is not served" }).optional(),
  return_tokens_as_token_ids: z.boolean().nullable().optional(),
});
type Completion = z.output<typeof CompletionRequest>;

export interface OpenAIRouteDeps {
  engine: TokenEngine;
  tokenizer: Tokenizer;
  modelName: string;
  /** The model names served (base and loaded LoRA adapters): another `model` is a 404. */
  models?: { check(model: string | null | undefined, field?: string): void };
}

function promptsOf(tok: Tokenizer, p: Completion["prompt"]): number[][] {
  if (typeof p === "string") return [tok.encode(p)];
  if (p.every((x) => typeof x === "number")) return [p as number[]];
  return (p as (string | number[])[]).map((x) => (typeof x === "string" ? tok.encode(x) : x));
}

type Top = { token: number; logprob: number }[];

function logprobsOf(tok: Tokenizer, b: Completion, ids: readonly number[], lps: readonly number[], tops?: readonly Top[], offset0 = 0) {
  if (b.logprobs == null) return null;
  const name = (t: number) => (b.return_tokens_as_token_ids ? `token_id:${t}` : tok.decode([t]));
  const tokens = ids.map(name);
  const text_offset: number[] = [];
  let at = offset0;
  for (const t of tokens) {
    text_offset.push(at);
    at += t.length;
  }
  const top_logprobs = tokens.map((t, i) => ({ ...Object.fromEntries((tops?.[i] ?? []).map((x) => [name(x.token), x.logprob])), [t]: lps[i]! }));
  return { text_offset, token_logprobs: lps.slice(), tokens, top_logprobs };
}

function choiceJson(tok: Tokenizer, b: Completion, index: number, prompt: number[], c: TextChoice) {
  return {
    index,
    text: c.text,
    logprobs: logprobsOf(tok, b, c.tokenIds, c.logprobs, c.topLogprobs),
    finish_reason: c.finishReason,
    stop_reason: c.stopReason,
    ...(b.return_token_ids ? { prompt_token_ids: prompt, token_ids: c.tokenIds } : {}),
  };
}

export function registerCompletionsRoute(app: FastifyInstance, d: OpenAIRouteDeps): void {
  app.post("/v1/completions", async (req, reply) => {
    const b = parseWith(CompletionRequest, req.body, "body");
    d.models?.check(b.model);
    const prompts = promptsOf(d.tokenizer, b.prompt);
    prompts.forEach((p, i) => checkPrompt(d.engine, p, prompts.length > 1 ? `prompt[${i}]` : "prompt"));
    const n = b.n ?? 1;
    const settings = { ...choiceSettings(b, b.max_tokens ?? 16), topLogprobs: b.logprobs ?? 0 };
    const head = { id: `cmpl-${randomUUID()}`, object: "text_completion", created: Math.floor(Date.now() / 1000), model: d.modelName };
    const signal = callerGone(reply);
    if (b.stream) return streamCompletions(reply, d, b, prompts, n, settings, head, signal);
    const runs = await Promise.all(prompts.map((p) => runChoices(d.engine, d.tokenizer, p, n, settings, signal)));
    const choices = runs.flatMap((cs, pi) => cs.map((c, j) => choiceJson(d.tokenizer, b, pi * n + j, prompts[pi]!, c)));
    const completion = runs.flat().reduce((s, c) => s + c.tokenIds.length, 0);
    return {
      ...head,
      choices,
      usage: usage(
        prompts.reduce((s, p) => s + p.length * n, 0),
        completion,
      ),
    };
  });
}

async function streamCompletions(
  reply: FastifyReply,
  d: OpenAIRouteDeps,
  b: Completion,
  prompts: number[][],
  n: number,
  settings: ReturnType<typeof choiceSettings>,
  head: Record<string, unknown>,
  signal: AbortSignal,
): Promise<void> {
  if (prompts.length * n > 16) throw new BadRequest("a stream serves at most 16 choices (prompts x n)");
  const sse = new SseStream(reply);
  const send = (choice: Record<string, unknown>) => sse.send({ ...head, choices: [choice] });
  try {
    const runs = await Promise.all(
      prompts.map((prompt, pi) => {
        const deltas = Array.from({ length: n }, () => new TextDeltas(d.tokenizer, settings.stop));
        const started = new Set<number>();
        return runChoices(d.engine, d.tokenizer, prompt, n, settings, signal, (j, t) => {
          const index = pi * n + j;
          const first = !started.has(j) && started.add(j);
          const ids = b.return_token_ids ? { token_ids: [t.tokenId], ...(first ? { prompt_token_ids: prompt } : {}) } : {};
          send({
            index,
            text: deltas[j]!.push(t.tokenId),
            logprobs: logprobsOf(d.tokenizer, b, [t.tokenId], [t.logprob], t.top ? [t.top] : undefined),
            finish_reason: null,
            ...ids,
          });
        }).then((cs) => {
          cs.forEach((c, j) =>
            send({ index: pi * n + j, text: deltas[j]!.finish(c.text), logprobs: null, finish_reason: c.finishReason, stop_reason: c.stopReason }),
          );
          return cs;
        });
      }),
    );
    if (b.stream_options?.include_usage) {
      const completion = runs.flat().reduce((s, c) => s + c.tokenIds.length, 0);
      sse.send({
        ...head,
        choices: [],
        usage: usage(
          prompts.reduce((s, p) => s + p.length * n, 0),
          completion,
        ),
      });
    }
    sse.end();
  } catch (e) {
    sse.fail((e as Error).message);
  }
}
