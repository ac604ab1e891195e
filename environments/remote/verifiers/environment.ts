// A verifiers env-server as an Environment: rollstream owns the tasks (a JSON-lines file per split) and the
// policy, the server owns the rollout and the rubric. A rollout is one `run` request carrying the task's data,
// a train client (our endpoint's base URL plus the rollout's session header) and the task's sampling; the server
// calls back on /inference/v1/generate for every model turn; its episode's trace, checked against what our engine
// served, becomes the rollout; scoreGroup hands back the scores the server computed. A lost server is waited for
// and the rollout run again (a fresh session, so nothing of the lost attempt is kept); a run past its deadline is
// cancelled on the server and fails (the task is redelivered later).
import type { Dataset, DatasetRow, SplitName } from "../../api/dataset.js";
import type { Environment } from "../../api/environment.js";
import type { RolloutContext, RolloutResult } from "../../api/rollout.js";
import type { ScoreResult } from "../../api/score.js";
import { taskFileDataset } from "../task-file.js";
import { EnvServerClient, ServerLostError } from "./env-client.js";
import { remoteScoreOf, trainableTrace, traceToRollout } from "./trace-rollout.js";
import type { RunRequest, WireSampling } from "./wire.js";
import type { SamplingArgs } from "../../api/model.js";

export interface VerifiersEnvOptions {
  /** The name after "verifiers:" in the run config. */
  name: string;
  /** The server reports no version (HealthResponse is success/error only): the config's, recorded on every row. */
  version: string;
  server: string;
  tasks: { train: string; eval: string };
  /** Deadline of one run request (one rollout). */
  deadlineMs: number;
  /** Runs again after a lost server, at most this many times per rollout. */
  retries: number;
  /** How long to wait for health at load and after a lost server. */
  connectMs: number;
}

export async function loadVerifiersEnvironment(opts: VerifiersEnvOptions): Promise<Environment> {
  const client = new EnvServerClient(opts.server);
  try {
    await client.waitHealthy(opts.connectMs);
  } catch (e) {
    await client.close();
    throw e;
  }
  const datasets = new Map<string, Dataset>();
  const dataset = (split: SplitName): Dataset => {
    if (split !== "train" && split !== "eval") throw new Error(`environment verifiers:${opts.name}: unknown split "${String(split)}" (train, eval)`);
    const s = split as "train" | "eval";
    let d = datasets.get(s);
    if (!d) datasets.set(s, (d = taskFileDataset(opts.tasks[s], s)));
    return d;
  };
  return {
    name: `verifiers:${opts.name}`,
    version: opts.version,
    needsSandbox: false,
    heldOutSplits: ["eval"],
    remote: { protocol: "verifiers", address: opts.server, needsEndpoint: true },
    dataset,
    rollout: (ctx, row) => runRollout(client, opts, ctx, row),
    scoreGroup: async (rollouts: RolloutResult[]): Promise<ScoreResult[]> => rollouts.map(remoteScoreOf),
    // The task's own SFT reply when its file gives one (sft_target: a deliberately weak teacher, say), else its answer.
    sftTarget: (row: DatasetRow) => {
      const t = (row.info["task"] as Record<string, unknown>)["sft_target"];
      return typeof t === "string" ? t : row.answer;
    },
    health: () => client.health(),
    close: () => client.close(),
  };
}

async function runRollout(client: EnvServerClient, opts: VerifiersEnvOptions, ctx: RolloutContext, row: DatasetRow): Promise<RolloutResult> {
  const endpoint = ctx.endpoint;
  if (!endpoint) throw new Error(`environment verifiers:${opts.name} needs the policy over HTTP (ctx.endpoint), which this runtime did not provide`);
  for (let attempt = 0; ; attempt++) {
    const session = endpoint.open(ctx.model, ctx.sampling);
    const t0 = performance.now();
    try {
      const episode = await client.run(runRequest(row, endpoint.baseUrl, endpoint.model, session.headers, ctx.sampling), opts.deadlineMs, ctx.signal);
      const ms = performance.now() - t0;
      // The engine's time on the server's calls; the rest of the episode is the environment's (and the wire's).
      const generateMs = Math.min(
        ms,
        session.calls.reduce((s, c) => s + c.ms, 0),
      );
      return traceToRollout(episode, trainableTrace(episode), session.calls, { generateMs, envMs: ms - generateMs });
    } catch (e) {
      if (!(e instanceof ServerLostError) || attempt >= opts.retries || ctx.signal?.aborted) throw e;
      await client.waitHealthy(opts.connectMs, ctx.signal);
    } finally {
      session.close();
    }
  }
}

function runRequest(row: DatasetRow, baseUrl: string, model: string, headers: Readonly<Record<string, string>>, s: SamplingArgs): RunRequest {
  const sampling: WireSampling = { temperature: s.temperature, top_p: s.topP, max_tokens: s.maxTokens };
  if (s.topK > 0) sampling.top_k = s.topK;
  return {
    task_data: row.info["task"] as Record<string, unknown>,
    client: {
      type: "train",
      base_url: baseUrl,
      api_key_var: "ROLLSTREAM_ENDPOINT_KEY",
      headers: { ...headers },
      renderer: null,
      renderer_model_name: null,
      multiplex: 256,
    },
    model,
    sampling,
  };
}
