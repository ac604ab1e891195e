import { errorMessage, type DatasetRow, type SplitName } from "../api/dataset.js";
import { envId, type Environment } from "../api/environment.js";
import type { ModelClient, SamplingArgs } from "../api/model.js";
import { completionMessages, type RolloutResult } from "../api/rollout.js";
import type { CodeSandbox } from "../api/sandbox.js";
import type { ModelEndpoint } from "../api/model-endpoint.js";
import type { EvalIdentity, EvalMetadata, EvalRecord } from "./records.js";
import { ResultsStore, type PendingRollout } from "./results-store.js";
import { summarize, type EvalSummary } from "./summary.js";

export interface EvalProgress {
  /** Finished rollouts (including ones resumed from disk). */
  done: number;
  total: number;
  /** Scored samples so far and their mean reward. */
  scored: number;
  rewardMean: number;
}

export interface RunEvalOptions {
  env: Environment;
  model: ModelClient;
  /** Examples: the first n rows of the split (fewer if the split is smaller). */
  n: number;
  /** Rollouts per example (the k of pass@k goes up to this). */
  rollouts: number;
  /** Rollouts in flight at once. */
  concurrency: number;
  sampling: SamplingArgs;
  /** Where results.jsonl, pending.jsonl and metadata.json go; an existing eval there is resumed. */
  outDir: string;
  onProgress?(p: EvalProgress): void;
  /** Default "eval"; an environment's other held-out splits (arithmetic's "hard") by name. */
  split?: SplitName;
  sandbox?: CodeSandbox;
  /** The model over HTTP, for a remote environment whose server calls it (verifiers). */
  endpoint?: ModelEndpoint;
  /** Abort = interrupt: in-flight rollouts are dropped, everything finished is on disk. */
  signal?: AbortSignal;
  /** A sample passes (for pass@k) when reward >= passThreshold. Default 1. */
  passThreshold?: number;
  /** Start over instead of resuming. */
  overwrite?: boolean;
  /** Extra facts for metadata.json (model, env args, command line). */
  info?: Record<string, unknown>;
}

export interface EvalReport {
  summary: EvalSummary;
  outDir: string;
  /** Pairs found done on disk at the start. */
  resumed: number;
  interrupted: boolean;
}

/**
 * Runs rollouts for n examples x r rollouts with bounded concurrency, scores each example's group with
 * the environment's rubric once the group is complete, and appends results as it goes so a rerun with
 * the same outDir skips finished (example, rollout) pairs. A rollout that throws is recorded as a failed
 * sample (reward 0, the error in errors) and never stops the eval.
 */
export async function runEval(opts: RunEvalOptions): Promise<EvalReport> {
  const { env, model, sampling } = opts;
  if (!(Number.isInteger(opts.n) && opts.n >= 1)) throw new Error(`runEval: n must be an integer >= 1, got ${opts.n}`);
  if (!(Number.isInteger(opts.rollouts) && opts.rollouts >= 1)) throw new Error(`runEval: rollouts must be an integer >= 1, got ${opts.rollouts}`);
  if (!(Number.isInteger(opts.concurrency) && opts.concurrency >= 1)) throw new Error(`runEval: concurrency must be an integer >= 1, got ${opts.concurrency}`);
  const split = opts.split ?? "eval";
  const R = opts.rollouts;
  const id = envId(env);
  const dataset = env.dataset(split);
  const n = Math.min(opts.n, dataset.size);
  if (n === 0) throw new Error(`environment ${id}: the "${split}" split is empty`);
  const passThreshold = opts.passThreshold ?? 1;
  const identity: EvalIdentity = { env: id, split, rolloutsPerExample: R, sampling, passThreshold };

  const store = new ResultsStore(opts.outDir);
  const opened = store.open(identity, { overwrite: opts.overwrite, rolloutsPerExample: R });
  const records = opened.records;
  const doneExamples = new Set(records.map((r) => r.example));
  const waiting = new Map<number, Map<number, PendingRollout>>();
  for (const p of opened.pending) {
    if (!waiting.has(p.example)) waiting.set(p.example, new Map());
    waiting.get(p.example)!.set(p.rollout, p);
  }
  const resumed = records.filter((r) => r.example < n).length + opened.pending.filter((p) => p.example < n).length;

  const startedAt = Date.now();
  const createdAt = opened.metadata?.createdAt ?? new Date().toISOString();
  let sessionModelTokens = 0;
  const summaryNow = () =>
    summarize(
      id,
      records.filter((r) => r.example < n),
      { rolloutsPerExample: R, passThreshold, wallSeconds: (Date.now() - startedAt) / 1000, sessionModelTokens },
    );
  const writeMetadata = (completed: boolean) => {
    const done = records.filter((r) => r.example < n).length;
    const m: EvalMetadata = {
      ...identity,
      n,
      createdAt,
      updatedAt: new Date().toISOString(),
      completed,
      done,
      info: opts.info ?? opened.metadata?.info ?? {},
      summary: summaryNow(),
    };
    store.writeMetadata(m);
  };
  writeMetadata(false);

  const rows = new Map<number, DatasetRow>();
  const rowOf = (example: number) => {
    let r = rows.get(example);
    if (!r) {
      r = dataset.row(example);
      rows.set(example, r);
    }
    return r;
  };
  const jobs: Array<{ example: number; rollout: number }> = [];
  for (let e = 0; e < n; e++) {
    if (doneExamples.has(e)) continue;
    for (let k = 0; k < R; k++) if (!waiting.get(e)?.has(k)) jobs.push({ example: e, rollout: k });
  }
  let finished = n * R - jobs.length;
  const progress = () => {
    const scored = records.filter((r) => r.example < n);
    opts.onProgress?.({
      done: finished,
      total: n * R,
      scored: scored.length,
      rewardMean: scored.length ? scored.reduce((s, r) => s + r.reward, 0) / scored.length : 0,
    });
  };
  progress();

  const scoring: Array<Promise<void>> = [];
  const scoreExample = async (example: number) => {
    const group = [...waiting.get(example)!.values()].sort((a, b) => a.rollout - b.rollout);
    let row: DatasetRow | null = null;
    try {
      row = rowOf(example);
    } catch {
      // A row that fails validation: every rollout of it already failed with that error.
    }
    const ok = row === null ? [] : group.filter((g): g is Extract<PendingRollout, { result: RolloutResult }> => "result" in g);
    const t0 = performance.now();
    let scores: Awaited<ReturnType<Environment["scoreGroup"]>>;
    try {
      scores =
        ok.length && row
          ? await env.scoreGroup(
              ok.map((g) => g.result),
              row,
              { sandbox: opts.sandbox },
            )
          : [];
      if (scores.length !== ok.length) throw new Error(`scoreGroup returned ${scores.length} scores for ${ok.length} rollouts`);
    } catch (err) {
      scores = ok.map(() => ({ reward: 0, components: {}, metrics: {}, errors: [`scoring failed: ${errorMessage(err)}`] }));
    }
    const scoreMs = ok.length ? (performance.now() - t0) / ok.length : 0;
    const out: EvalRecord[] = group.map((g) => {
      if ("error" in g || !row) return failedRecord(g.example, g.rollout, row, "error" in g ? g.error : "row unavailable");
      const s = scores[ok.indexOf(g)]!;
      return toRecord(g.example, g.rollout, row, g.result, s, scoreMs);
    });
    store.appendRecords(out);
    records.push(...out);
    waiting.delete(example);
    writeMetadata(false);
    progress();
  };
  const arrive = (p: PendingRollout) => {
    store.appendPending(p);
    if (!waiting.has(p.example)) waiting.set(p.example, new Map());
    waiting.get(p.example)!.set(p.rollout, p);
    finished++;
    if (waiting.get(p.example)!.size === R) scoring.push(scoreExample(p.example));
    else progress();
  };
  // Groups completed entirely from disk are scored first.
  for (const [e, g] of waiting) if (e < n && g.size === R) scoring.push(scoreExample(e));

  let interrupted = false;
  const worker = async () => {
    for (;;) {
      if (opts.signal?.aborted) {
        interrupted = true;
        return;
      }
      const job = jobs.shift();
      if (!job) return;
      try {
        const row = rowOf(job.example);
        const result = await env.rollout({ model, sampling, sandbox: opts.sandbox, signal: opts.signal, endpoint: opts.endpoint }, row);
        sessionModelTokens += result.completionMask.reduce((s, m) => s + m, 0);
        arrive({ ...job, result });
      } catch (err) {
        if (opts.signal?.aborted) {
          interrupted = true;
          return;
        }
        arrive({ ...job, error: errorMessage(err) });
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(opts.concurrency, Math.max(1, jobs.length)) }, worker));
  await Promise.all(scoring);
  store.compactPending([...waiting.values()].flatMap((g) => [...g.values()]));
  const complete = !interrupted && records.filter((r) => r.example < n).length === n * R;
  writeMetadata(complete);
  return { summary: summaryNow(), outDir: opts.outDir, resumed, interrupted };
}

function toRecord(
  example: number,
  rollout: number,
  row: DatasetRow,
  r: RolloutResult,
  s: { reward: number; components: Record<string, number>; metrics: Record<string, number>; errors: string[] },
  scoreMs: number,
): EvalRecord {
  const completion = completionMessages(r, row);
  return {
    example,
    rollout,
    rowId: row.id,
    reward: s.reward,
    components: s.components,
    metrics: s.metrics,
    errors: s.errors,
    stopReason: r.stopReason,
    isTruncated: r.isTruncated,
    numTurns: r.numTurns,
    promptTokens: r.promptIds.length,
    completionTokens: r.completionIds.length,
    modelTokens: r.completionMask.reduce((a, m) => a + m, 0),
    policyVersion: [r.policyVersionMin, r.policyVersionMax],
    generateMs: r.timings.generateMs,
    envMs: r.timings.envMs,
    scoreMs,
    answer: row.answer,
    prompt: r.messages.slice(0, r.messages.length - completion.length),
    completion,
  };
}

function failedRecord(example: number, rollout: number, row: DatasetRow | null, error: string): EvalRecord {
  return {
    example,
    rollout,
    rowId: row?.id ?? `#${example}`,
    reward: 0,
    components: {},
    metrics: {},
    errors: [`rollout failed: ${error}`],
    stopReason: "error",
    isTruncated: false,
    numTurns: 0,
    promptTokens: 0,
    completionTokens: 0,
    modelTokens: 0,
    policyVersion: [0, 0],
    generateMs: 0,
    envMs: 0,
    scoreMs: 0,
    answer: row?.answer ?? "",
    prompt: row?.prompt ?? [],
    completion: [],
  };
}
