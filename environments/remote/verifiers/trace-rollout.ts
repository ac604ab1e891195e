// One verifiers trace becomes one RolloutResult, and is checked against the engine's own record of the rollout
// first. The trace's token layout follows verifiers/v1/graph.py (MessageNode: token_ids, mask, logprobs over the
// mask-1 tokens) and verifiers/v1/trace.py (Branch.token_ids / sampled_mask / logprobs, is_truncated) @a60a606;
// one linear branch is one training sample, as prime-rl's trace_to_samples makes it (orchestrator/
// trajectories.py@559b447). What the learner trains must be what our engine sampled: each sampled node's tokens
// must be, in order, exactly the tokens of one generate call the engine served for this rollout, continuing
// exactly the tokens before them. Anything else throws TraceMismatchError (the runtime dead-letters the task
// with the reason); logprobs and policy versions come from the engine's record, never from the trace.
import type { ChatMessage, ChatRole } from "../../api/messages.js";
import type { EndpointCall } from "../../api/model-endpoint.js";
import type { VersionSpan } from "../../api/model.js";
import type { RolloutResult } from "../../api/rollout.js";
import type { ScoreResult } from "../../api/score.js";
import type { Episode, MessageNode, Trace } from "./wire.js";

/** The trace says other than the engine generated: never trained. */
export class TraceMismatchError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "TraceMismatchError";
  }
}

/** Upstream Trace.is_truncated: a framework limit, or a final call that finished on length. */
const TRUNCATING = new Set(["max_turns", "max_input_tokens", "max_output_tokens", "max_total_tokens", "context_length"]);
/** Tolerance between the logprob the engine returned and the one the trace carries (msgpack float64 either way). */
const LOGPROB_TOLERANCE = 1e-4;

/** What the reward actor needs of a remote rollout: the server's scores, kept in the rollout's state. */
export interface RemoteScore {
  reward: number;
  components: Record<string, number>;
  metrics: Record<string, number>;
  errors: string[];
}

/** The trainable trace of an episode: exactly one (multi-agent episodes are not trained here yet). */
export function trainableTrace(ep: Episode): Trace {
  const traces = ep.traces.filter((t) => t.agent?.trainable !== false);
  if (traces.length !== 1) throw new TraceMismatchError(`episode ${ep.id} has ${traces.length} trainable traces (one is supported)`);
  return traces[0]!;
}

export function traceToRollout(ep: Episode, trace: Trace, calls: readonly EndpointCall[], timings: RolloutResult["timings"]): RolloutResult {
  const nodes = linearNodes(trace);
  const firstSampled = nodes.findIndex((n) => n.sampled);
  const ids: number[] = [];
  const mask: number[] = [];
  const sampledAt: Array<{ node: number; start: number; tokens: number[]; logprobs: number[] }> = [];
  nodes.forEach((n, k) => {
    checkNode(n, k, trace.id);
    const tokens: number[] = [];
    n.token_ids.forEach((id, i) => {
      if (n.mask[i]) tokens.push(id);
    });
    if (n.sampled) sampledAt.push({ node: k, start: ids.length + n.mask.indexOf(true), tokens, logprobs: n.logprobs });
    else if (tokens.length > 0) throw new TraceMismatchError(`trace ${trace.id} node ${k} (${n.message.role}) has trainable tokens but was not sampled`);
    ids.push(...n.token_ids);
    for (const m of n.mask) mask.push(m ? 1 : 0);
  });
  if (sampledAt.length === 0) throw new TraceMismatchError(`trace ${trace.id} has no sampled turn`);
  checkAgainstEngine(trace.id, ids, sampledAt, calls);
  const promptLen = sampledAt[0]!.start;
  const completionIds = ids.slice(promptLen);
  const completionMask = mask.slice(promptLen);
  const samplerLogprobs = new Array<number>(completionIds.length).fill(0);
  const versionSpans: VersionSpan[] = [];
  sampledAt.forEach((s, j) => {
    const gen = calls[j]!.generation;
    const offset = s.start - promptLen;
    gen.logprobs.forEach((lp, i) => {
      samplerLogprobs[offset + i] = lp;
    });
    for (const span of gen.versionSpans ?? [{ version: gen.policyVersion, start: 0, end: gen.tokenIds.length }]) {
      versionSpans.push({ version: span.version, start: span.start + offset, end: span.end + offset });
    }
  });
  const versions = versionSpans.map((v) => v.version);
  const last = [...trace.calls].reverse().find((c) => c.finish_reason !== undefined);
  const stop = trace.stop_condition ?? (trace.is_completed ? "completed" : "unknown");
  return {
    promptIds: ids.slice(0, promptLen),
    completionIds,
    completionMask,
    samplerLogprobs,
    messages: nodes.map((n) => toMessage(n)),
    numTurns: sampledAt.length,
    turnOffsets: sampledAt.map((s) => s.start - promptLen),
    stopReason: stop,
    isTruncated: TRUNCATING.has(stop) || last?.finish_reason === "length",
    policyVersionMin: Math.min(...versions),
    policyVersionMax: Math.max(...versions),
    versionSpans,
    state: {
      promptLength: firstSampled,
      remote: {
        protocol: "verifiers",
        episode: ep.id,
        trace: trace.id,
        env: ep.env.id,
        verifiers: trace.verifiers?.version ?? null,
        score: scoreOfTrace(ep, trace),
      },
    },
    timings,
  };
}

/** The server's scores (rubrics run there): reward = Σ score × weight, as upstream Trace.reward. */
export function scoreOfTrace(ep: Episode, trace: Trace): RemoteScore {
  const components: Record<string, number> = {};
  let reward = 0;
  for (const [name, r] of Object.entries(trace.rewards)) {
    if (!r) continue;
    components[name] = r.score;
    reward += r.score * r.weight;
  }
  const metrics: Record<string, number> = {};
  for (const [name, v] of Object.entries(trace.metrics)) if (typeof v === "number" && Number.isFinite(v)) metrics[name] = v;
  const errors = [...ep.errors, ...trace.errors].map((e) => `${e.type}: ${e.message}`);
  return { reward, components, metrics, errors };
}

/** The score a remote rollout carries in its state; a rollout without one is not a remote rollout. */
export function remoteScoreOf(r: RolloutResult): ScoreResult {
  const remote = r.state["remote"] as { score?: RemoteScore } | undefined;
  if (!remote?.score) throw new Error("a remote environment's rollout carries no score from its server (state.remote.score)");
  return { ...remote.score };
}

function linearNodes(trace: Trace): MessageNode[] {
  trace.nodes.forEach((n, k) => {
    if (n.parent !== (k === 0 ? null : k - 1)) {
      throw new TraceMismatchError(`trace ${trace.id} branches (node ${k} follows node ${n.parent}): only one linear branch per trace is trained here`);
    }
  });
  return trace.nodes;
}

function checkNode(n: MessageNode, k: number, traceId: string): void {
  if (n.mask.length !== n.token_ids.length)
    throw new TraceMismatchError(`trace ${traceId} node ${k}: ${n.mask.length} mask entries for ${n.token_ids.length} tokens`);
  const sampled = n.mask.filter(Boolean).length;
  if (n.sampled && n.logprobs.length !== sampled)
    throw new TraceMismatchError(`trace ${traceId} node ${k}: ${n.logprobs.length} logprobs for ${sampled} sampled tokens`);
  // Upstream's canonical layout: scaffold first, then the completion; a mask-1 run with holes is not one call.
  const first = n.mask.indexOf(true);
  if (first >= 0 && n.mask.slice(first).some((m) => !m))
    throw new TraceMismatchError(`trace ${traceId} node ${k}: its sampled tokens are not one run at the end`);
}

function checkAgainstEngine(
  traceId: string,
  ids: readonly number[],
  sampled: ReadonlyArray<{ node: number; start: number; tokens: number[]; logprobs: number[] }>,
  calls: readonly EndpointCall[],
): void {
  if (sampled.length !== calls.length) {
    throw new TraceMismatchError(`trace ${traceId} has ${sampled.length} sampled turns but the engine served ${calls.length} generate calls for this rollout`);
  }
  sampled.forEach((s, j) => {
    const { promptIds, generation } = calls[j]!;
    const where = `trace ${traceId} turn ${j} (node ${s.node})`;
    const prefixAt = firstDiff(ids.slice(0, s.start), promptIds);
    if (prefixAt !== null) throw new TraceMismatchError(`${where}: the tokens before it differ from the prompt the engine continued at position ${prefixAt}`);
    const tokAt = firstDiff(s.tokens, generation.tokenIds);
    if (tokAt !== null) {
      throw new TraceMismatchError(
        `${where}: token ${tokAt} is ${s.tokens[tokAt] ?? "(none)"} in the trace but the engine sampled ${generation.tokenIds[tokAt] ?? "(none)"}`,
      );
    }
    const lpAt = s.logprobs.findIndex((lp, i) => !(Math.abs(lp - generation.logprobs[i]!) <= LOGPROB_TOLERANCE));
    if (lpAt >= 0)
      throw new TraceMismatchError(`${where}: logprob ${lpAt} is ${s.logprobs[lpAt]} in the trace but ${generation.logprobs[lpAt]} in the engine's record`);
  });
}

/** Index of the first difference, or null when equal. */
function firstDiff(a: readonly number[], b: readonly number[]): number | null {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) if (a[i] !== b[i]) return i;
  return a.length === b.length ? null : n;
}

const ROLES = new Set<ChatRole>(["system", "user", "assistant", "tool"]);

function toMessage(n: MessageNode): ChatMessage {
  const c = n.message.content;
  const content = typeof c === "string" ? c : Array.isArray(c) ? c.map((p) => p.text ?? "").join("") : "";
  const role = ROLES.has(n.message.role as ChatRole) ? (n.message.role as ChatRole) : "user";
  return { role, content };
}
