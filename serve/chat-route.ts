// POST /v1/chat/completions as vLLM serves it (vllm/entrypoints/openai/chat_completion/protocol.py
// ChatCompletionRequest, ChatCompletionResponse, ChatCompletionStreamResponse): the messages rendered with the
// model's chat template (tools passed to it, as transformers' apply_chat_template does), n choices, logprobs
// {content[].{token, logprob, bytes, top_logprobs}} (top_logprobs: the k most likely tokens, by the model's own
// distribution, log_softmax of the raw logits, as vLLM's default raw_logprobs), return_token_ids (prompt_token_ids on the answer, token_ids on
// each choice), stream: SSE deltas (role first, then content). With tools in the request (and tool_choice not
// "none"), tool calls are parsed out of the reply as vLLM's hermes parser does for Qwen2.5/Qwen3
// (--enable-auto-tool-choice --tool-call-parser hermes: entrypoints/openai/tool_parsers/hermes_tool_parser.py):
// every <tool_call>{"name", "arguments"}</tool_call> block becomes message.tool_calls[i] = {id, type: "function",
// function: {name, arguments: JSON text}}, content is the text before the first block (null when empty), and
// finish_reason is "tool_calls"; a block that is not valid JSON leaves the whole reply as content, no calls. A
// stream shows content up to the first block, then the calls in one delta.
import { randomUUID } from "node:crypto";
import type { FastifyInstance, FastifyReply } from "fastify";
import { z } from "zod";
import type { ChatMessage, Tokenizer } from "../kernels/tokenizer.js";
import type { OpenAIRouteDeps } from "./completions-route.js";
import { BadRequest, parseWith } from "./http-errors.js";
import { choiceSettings, SharedFields, usage } from "./openai-fields.js";
import { callerGone, SseStream } from "./sse.js";
import { runChoices, type TextChoice, TextDeltas } from "./text-choices.js";
import { checkPrompt } from "./vllm-generate-route.js";
import { HERMES_OPEN, parseHermesCalls, pythonJson } from "../environments/api/hermes-tool-calls.js";

const int = z.number().int();
const TextPart = z.object({ type: z.literal("text", { message: "only text content parts are served" }), text: z.string() });

const Message = z.object({
  role: z.enum(["system", "developer", "user", "assistant", "tool"]),
  content: z
    .union([z.string(), z.array(TextPart)])
    .nullable()
    .optional(),
  name: z.string().optional(),
  tool_calls: z.array(z.record(z.string(), z.unknown())).optional(),
  tool_call_id: z.string().optional(),
});

const Tool = z.object({
  type: z.literal("function"),
  function: z.object({ name: z.string().min(1), description: z.string().optional(), parameters: z.record(z.string(), z.unknown()).optional() }),
});

export const ChatCompletionRequest = z.object({
  ...SharedFields,
  messages: z.array(Message).min(1),
  max_tokens: int.min(1).nullable().optional(),
  max_completion_tokens: int.min(1).nullable().optional(),
  logprobs: z.boolean().nullable().optional(),
  top_logprobs: int.min(0).max(20).nullable().optional(),
  tools: z.array(Tool).nullable().optional(),
  tool_choice: z
    .union([z.enum(["none", "auto"]), z.record(z.string(), z.unknown())])
    .nullable()
    .optional(),
  add_generation_prompt: z.boolean().nullable().optional(),
});
type Chat = z.output<typeof ChatCompletionRequest>;

/** The messages as the template sees them: text parts joined, developer as system, tool-call fields kept. */
function messagesOf(b: Chat): ChatMessage[] {
  return b.messages.map((m) => {
    const content = m.content == null ? "" : typeof m.content === "string" ? m.content : m.content.map((p) => p.text).join("");
    const extra = {
      ...(m.tool_calls ? { tool_calls: m.tool_calls } : {}),
      ...(m.tool_call_id ? { tool_call_id: m.tool_call_id } : {}),
      ...(m.name ? { name: m.name } : {}),
    };
    return { role: m.role === "developer" ? "system" : m.role, content, ...extra };
  });
}

function promptOf(d: OpenAIRouteDeps, b: Chat): number[] {
  try {
    return d.tokenizer.applyChatTemplate(messagesOf(b), {
      addGenerationPrompt: b.add_generation_prompt ?? true,
      ...(b.tools?.length ? { tools: b.tools } : {}),
    });
  } catch (e) {
    throw new BadRequest(`messages: the chat template failed (${(e as Error).message})`);
  }
}

/** logprobs.content: each token, its logprob and its top_logprobs (the k most likely, most likely first). */
function logprobsOf(tok: Tokenizer, b: Chat, ids: readonly number[], lps: readonly number[], tops?: readonly { token: number; logprob: number }[][]) {
  if (!b.logprobs) return null;
  const entry = (t: number, logprob: number) => {
    const token = tok.decode([t]);
    return { token, logprob, bytes: [...Buffer.from(token, "utf8")] };
  };
  return {
    content: ids.map((t, i) => ({ ...entry(t, lps[i]!), top_logprobs: (tops?.[i] ?? []).map((x) => entry(x.token, x.logprob)) })),
  };
}

interface ToolCallJson {
  id: string;
  type: "function";
  function: { name: string; arguments: string };
}

/** The reply's Hermes tool calls and the content before them; null when tools are off or it makes no (valid) call. */
export function toolCallsOf(b: Chat, text: string): { content: string | null; calls: ToolCallJson[] } | null {
  if (!b.tools?.length || b.tool_choice === "none") return null;
  const at = text.indexOf(HERMES_OPEN);
  if (at < 0) return null;
  const parsed = parseHermesCalls(text.slice(at));
  const calls: ToolCallJson[] = [];
  for (const p of parsed) {
    if (!p.ok || typeof p.args !== "object" || p.args === null) return null;
    const id = `chatcmpl-tool-${randomUUID().replaceAll("-", "")}`;
    calls.push({ id, type: "function", function: { name: p.name, arguments: pythonJson(p.args) } });
  }
  return { content: at > 0 ? text.slice(0, at) : null, calls };
}

function choiceJson(tok: Tokenizer, b: Chat, index: number, c: TextChoice) {
  const tools = toolCallsOf(b, c.text);
  return {
    index,
    message: { role: "assistant", content: tools ? tools.content : c.text, tool_calls: tools?.calls ?? [] },
    logprobs: logprobsOf(tok, b, c.tokenIds, c.logprobs, c.topLogprobs),
    finish_reason: tools ? "tool_calls" : c.finishReason,
    stop_reason: c.stopReason,
    ...(b.return_token_ids ? { token_ids: c.tokenIds } : {}),
  };
}

export function registerChatRoute(app: FastifyInstance, d: OpenAIRouteDeps): void {
  app.post("/v1/chat/completions", async (req, reply) => {
    const b = parseWith(ChatCompletionRequest, req.body, "body");
    d.models?.check(b.model);
    const prompt = promptOf(d, b);
    checkPrompt(d.engine, prompt, "messages (rendered)");
    const n = b.n ?? 1;
    const room = d.engine.limits.contextTokens - prompt.length;
    if (b.top_logprobs && !b.logprobs) throw new BadRequest("top_logprobs: needs logprobs: true");
    const settings = {
      ...choiceSettings(b, Math.min(room, b.max_completion_tokens ?? b.max_tokens ?? room)),
      topLogprobs: b.logprobs ? (b.top_logprobs ?? 0) : 0,
    };
    const head = { id: `chatcmpl-${randomUUID()}`, created: Math.floor(Date.now() / 1000), model: d.modelName };
    const signal = callerGone(reply);
    if (b.stream) return streamChat(reply, d, b, prompt, n, settings, head, signal);
    const cs = await runChoices(d.engine, d.tokenizer, prompt, n, settings, signal);
    const completion = cs.reduce((s, c) => s + c.tokenIds.length, 0);
    return {
      ...head,
      object: "chat.completion",
      choices: cs.map((c, i) => choiceJson(d.tokenizer, b, i, c)),
      usage: usage(prompt.length, completion),
      ...(b.return_token_ids ? { prompt_token_ids: prompt } : {}),
    };
  });
}

async function streamChat(
  reply: FastifyReply,
  d: OpenAIRouteDeps,
  b: Chat,
  prompt: number[],
  n: number,
  settings: ReturnType<typeof choiceSettings>,
  head: Record<string, unknown>,
  signal: AbortSignal,
): Promise<void> {
  const sse = new SseStream(reply);
  const send = (choice: Record<string, unknown>, extra: Record<string, unknown> = {}) =>
    sse.send({ ...head, object: "chat.completion.chunk", choices: [choice], ...extra });
  const toolsOn = !!b.tools?.length && b.tool_choice !== "none";
  const deltas = Array.from({ length: n }, () => new TextDeltas(d.tokenizer, settings.stop, toolsOn ? HERMES_OPEN : undefined));
  for (let i = 0; i < n; i++)
    send({ index: i, delta: { role: "assistant", content: "" }, logprobs: null, finish_reason: null }, b.return_token_ids ? { prompt_token_ids: prompt } : {});
  try {
    const cs = await runChoices(d.engine, d.tokenizer, prompt, n, settings, signal, (i, t) => {
      const ids = b.return_token_ids ? { token_ids: [t.tokenId] } : {};
      send({
        index: i,
        delta: { content: deltas[i]!.push(t.tokenId) },
        logprobs: logprobsOf(d.tokenizer, b, [t.tokenId], [t.logprob], t.top ? [t.top] : undefined),
        finish_reason: null,
        ...ids,
      });
    });
    cs.forEach((c, i) => {
      const tools = toolCallsOf(b, c.text);
      if (!tools) {
        send({ index: i, delta: { content: deltas[i]!.finish(c.text) }, logprobs: null, finish_reason: c.finishReason, stop_reason: c.stopReason });
        return;
      }
      const tool_calls = tools.calls.map((call, index) => ({ index, ...call }));
      send({ index: i, delta: { content: deltas[i]!.finish(tools.content ?? ""), tool_calls }, logprobs: null, finish_reason: null });
      send({ index: i, delta: {}, logprobs: null, finish_reason: "tool_calls", stop_reason: c.stopReason });
    });
    if (b.stream_options?.include_usage) {
      sse.send({
        ...head,
        object: "chat.completion.chunk",
        choices: [],
        usage: usage(
          prompt.length,
          cs.reduce((s, c) => s + c.tokenIds.length, 0),
        ),
      });
    }
    sse.end();
  } catch (e) {
    sse.fail((e as Error).message);
  }
}
