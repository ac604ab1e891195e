// An OpenEnv server as an Environment: our engine plays the policy. A rollout opens a WebSocket session, resets
// the environment (the row's reset arguments, e.g. a seed), shows the model the observation's text, and maps
// the observation/reward/done loop onto multiTurnRollout: each model turn becomes a step action, each step's
// observation the next user message, done ends the rollout. The rewards the server gives are summed (scores
// come from the server, as for verifiers). Health and metadata over HTTP (/health, /metadata) at load.
import { generatorDataset, type DatasetRow, type SplitName } from "../../api/dataset.js";
import type { Environment } from "../../api/environment.js";
import { lastAssistantText } from "../../api/messages.js";
import { multiTurnRollout } from "../../api/multi-turn.js";
import type { RolloutContext, RolloutResult } from "../../api/rollout.js";
import type { ScoreResult } from "../../api/score.js";
import { remoteScoreOf } from "../verifiers/trace-rollout.js";
import { OpenEnvLostError, OpenEnvSession, type StepResult } from "./session.js";

export interface OpenEnvOptions {
  name: string;
  url: string;
  deadlineMs: number;
  retries: number;
  connectMs: number;
  /** actionKey (default "message"): the action field the model's reply goes in; observationKey (default "prompt"):
   *  the observation field shown to the model; trainSize / evalSize: seeds per split; maxTurns (default 8). */
  args: Record<string, unknown>;
}

const EVAL_SEED_BASE = 1_000_000;

export async function loadOpenEnvEnvironment(opts: OpenEnvOptions): Promise<Environment> {
  const http = opts.url.replace(/^ws/, "http").replace(/\/+$/, "");
  await waitHealthy(http, opts.connectMs);
  const meta = (await getJson(`${http}/metadata`, 5_000)) as { name?: unknown; version?: unknown };
  const version = typeof meta.version === "string" && meta.version ? meta.version : "0.0.0";
  const str = (k: string, d: string) => (typeof opts.args[k] === "string" ? (opts.args[k] as string) : d);
  const num = (k: string, d: number) => (typeof opts.args[k] === "number" ? (opts.args[k] as number) : d);
  const keys = { action: str("actionKey", "message"), observation: str("observationKey", "prompt"), maxTurns: num("maxTurns", 8) };
  const rows = (split: "train" | "eval") =>
    generatorDataset(num(`${split}Size`, split === "train" ? 100_000 : 200), (i) => {
      const seed = split === "train" ? i : EVAL_SEED_BASE + i;
      return { id: `${split}-${seed}`, prompt: [{ role: "user", content: `(${opts.name}, seed ${seed})` }], answer: "", info: { reset: { seed } } };
    });
  const env: Environment = {
    name: `openenv:${opts.name}`,
    version,
    needsSandbox: false,
    heldOutSplits: ["eval"],
    remote: { protocol: "openenv", address: opts.url, needsEndpoint: false },
    dataset: (split: SplitName) => {
      if (split === "train" || split === "eval") return rows(split as "train" | "eval");
      throw new Error(`environment openenv:${opts.name}: unknown split "${String(split)}" (train, eval)`);
    },
    rollout: (ctx, row) => withRetries(opts, http, ctx, () => episode(`${http}/ws`, opts, keys, ctx, row)),
    scoreGroup: async (rollouts: RolloutResult[]): Promise<ScoreResult[]> => rollouts.map(remoteScoreOf),
    health: () =>
      getJson(`${http}/health`, 2_000).then(
        () => true,
        () => false,
      ),
  };
  return env;
}

async function withRetries(opts: OpenEnvOptions, http: string, ctx: RolloutContext, run: () => Promise<RolloutResult>): Promise<RolloutResult> {
  for (let attempt = 0; ; attempt++) {
    try {
      return await run();
    } catch (e) {
      if (!(e instanceof OpenEnvLostError) || attempt >= opts.retries || ctx.signal?.aborted) throw e;
      await waitHealthy(http, opts.connectMs);
    }
  }
}

async function episode(
  wsUrl: string,
  opts: OpenEnvOptions,
  keys: { action: string; observation: string; maxTurns: number },
  ctx: RolloutContext,
  row: DatasetRow,
): Promise<RolloutResult> {
  const session = await OpenEnvSession.open(wsUrl, opts.connectMs);
  const rewards: number[] = [];
  const text = (r: StepResult) => {
    if (r.reward !== null) rewards.push(r.reward);
    const v = r.observation[keys.observation];
    return typeof v === "string" ? v : JSON.stringify(r.observation);
  };
  try {
    const first = await session.reset(row.info["reset"] as Record<string, unknown>);
    const result = await multiTurnRollout(ctx, row, {
      prompt: [{ role: "user", content: text(first) }],
      maxTurns: keys.maxTurns,
      timeoutMs: opts.deadlineMs,
      envResponse: async (messages) => {
        const r = await session.step({ [keys.action]: lastAssistantText(messages) });
        return { messages: [{ role: "user", content: text(r) }], done: r.done };
      },
    });
    // A lost socket inside envResponse ends multiTurnRollout with env_error: run the rollout again instead.
    const errors = Array.isArray(result.state["errors"]) ? (result.state["errors"] as string[]) : [];
    const lost = errors.find((e) => e.includes("OpenEnv server") && e.includes("went away"));
    if (lost) throw new OpenEnvLostError(wsUrl, lost);
    const reward = rewards.reduce((a, b) => a + b, 0);
    const score = { reward, components: { reward }, metrics: { steps: rewards.length }, errors };
    return { ...result, state: { ...result.state, remote: { protocol: "openenv", score } } };
  } finally {
    session.close();
  }
}

async function waitHealthy(http: string, timeoutMs: number): Promise<void> {
  const until = Date.now() + timeoutMs;
  for (;;) {
    try {
      const h = (await getJson(`${http}/health`, 2_000)) as { status?: unknown };
      if (h.status === undefined || h.status === "healthy") return;
    } catch (e) {
      if (Date.now() >= until) throw new Error(`OpenEnv server ${http} did not answer /health within ${timeoutMs} ms: ${(e as Error).message}`);
    }
    if (Date.now() >= until) throw new Error(`OpenEnv server ${http} is not healthy after ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

async function getJson(url: string, timeoutMs: number): Promise<unknown> {
  const res = await fetch(url, { signal: AbortSignal.timeout(timeoutMs) });
  if (!res.ok) throw new Error(`GET ${url}: HTTP ${res.status}`);
  return res.json();
}
