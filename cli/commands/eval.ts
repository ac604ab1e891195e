// `rollstream eval <env[@range]>`: rollouts of an environment with our checkpoint or an OpenAI-compatible
// endpoint; prints reward, each rubric function and metric, pass@k, stop reasons, errors and timing; saves
// results.jsonl + metadata.json as it goes, so the same command resumes after an interruption.
import { existsSync } from "node:fs";
import { basename, join, resolve } from "node:path";
import { InvalidArgumentError, type Command } from "commander";
import { UsageError } from "../errors.js";
import { loadRunConfig } from "../../actors/runtime/config.js";
import { isRunCheckpoint, runConfigPathOf } from "../../actors/runtime/run-checkpoint.js";
import cliProgress from "cli-progress";
import type { CodeSandbox, Environment, ModelClient, SamplingArgs, TokenizerLike } from "../../environments/api/index.js";
import { OpenAICompletionsClient } from "../../environments/clients/openai.js";
import { formatSummary, runEval, type EvalProgress, type EvalReport } from "../../environments/eval/index.js";
import { resolveEnvironment } from "../../environments/registry.js";
import { isRemoteEnvironmentId, loadRemoteEnvironment } from "../../environments/remote/index.js";
import { EndpointServer } from "../../actors/runtime/model-endpoint/endpoint-server.js";

export interface EvalCommandDeps {
  /** A client over one of our checkpoints (supplied by the CLI wiring: it needs the kernels). */
  makeCheckpointClient(path: string, opts: { threads?: number; seed?: number }): Promise<ModelClient>;
  /** Tokenizer for --base-url endpoints, from --tokenizer ("byte" or "hf:<path>"). Default: kernels/tokenizer.ts. */
  loadTokenizer?(spec: string): TokenizerLike | Promise<TokenizerLike>;
  /** A sandbox for code environments. Default: the NATS sandbox service at --nats / NATS_URL, when given. */
  makeSandbox?(natsUrl: string): Promise<{ sandbox: CodeSandbox; close(): Promise<void> }>;
}

interface EvalFlags {
  numExamples: number;
  rollouts: number;
  concurrency: number;
  envArgs: Record<string, unknown>;
  split: string;
  temperature: number;
  topP: number;
  topK: number;
  maxTokens: number;
  stop?: string[];
  checkpoint?: string;
  baseUrl?: string;
  model?: string;
  apiKey?: string;
  tokenizer: string;
  threads?: number;
  seed?: number;
  nats?: string;
  out?: string;
  overwrite?: boolean;
  passThreshold: number;
  json?: boolean;
  progress: boolean;
  server?: string;
  url?: string;
  tasks?: string;
  envVersion?: string;
  deadlineMs: number;
}

const int = (min: number) => (v: string) => {
  const n = Number(v);
  if (!Number.isInteger(n) || n < min) throw new InvalidArgumentError(`expected an integer >= ${min}, got "${v}"`);
  return n;
};
const num =
  (min: number, max = Number.POSITIVE_INFINITY) =>
  (v: string) => {
    const n = Number(v);
    if (!Number.isFinite(n) || n < min || n > max) throw new InvalidArgumentError(`expected a number in [${min}, ${max}], got "${v}"`);
    return n;
  };
const jsonObject = (v: string) => {
  try {
    const o: unknown = JSON.parse(v);
    if (o && typeof o === "object" && !Array.isArray(o)) return o as Record<string, unknown>;
  } catch {
    // fall through
  }
  throw new InvalidArgumentError(`expected a JSON object, got ${v}`);
};
const collect = (v: string, prev: string[] = []) => [...prev, v];

export function registerEvalCommand(program: Command, deps: EvalCommandDeps): void {
  program
    .command("eval <env>")
    .description("evaluate a model on an environment (name or name@version-range); resumes an interrupted run")
    .option("-n, --num-examples <n>", "examples (first n rows of the split)", int(1), 20)
    .option("-r, --rollouts <r>", "rollouts per example (pass@k up to r)", int(1), 4)
    .option("-c, --concurrency <c>", "rollouts in flight", int(1), 8)
    .option("-a, --env-args <json>", "environment args as a JSON object", jsonObject, {})
    .option(
      "--split <split>",
      "dataset split: eval (follows train's distribution), train, or another held-out split the environment offers (arithmetic: hard)",
      (v: string) => {
        if (!/^[a-z][a-z0-9_-]*$/.test(v)) throw new InvalidArgumentError(`expected a split name such as eval, train or hard, got "${v}"`);
        return v;
      },
      "eval",
    )
    .option("--temperature <t>", "sampling temperature (the run's evaluator is greedy, 0, for its pass@1; 1 here samples for pass@k)", num(0), 1)
    .option("--top-p <p>", "nucleus sampling mass", num(Number.MIN_VALUE, 1), 1)
    .option("--top-k <k>", "top-k (0 = off)", int(0), 0)
    .option("--max-tokens <n>", "new tokens per model turn", int(1), 256)
    .option("--stop <s>", "stop string (repeatable)", collect)
    .option("--checkpoint <path>", "our model: an HF folder (config.json + model.safetensors; its tokenizer.json if present) or a run checkpoint")
    .option("--base-url <url>", "an OpenAI-compatible server (/v1/completions)")
    .option("--model <name>", "model name for --base-url")
    .option("--api-key <key>", "API key for --base-url (default: OPENAI_API_KEY)")
    .option("--tokenizer <spec>", "tokenizer of the --base-url model: byte or hf:<path>", "byte")
    .option("--threads <n>", "CPU threads for --checkpoint", int(1))
    .option("--seed <n>", "sampling seed for --checkpoint", int(0))
    .option("--nats <url>", "NATS server with the sandbox service, for code environments (default: NATS_URL)")
    .option("-o, --out <dir>", "output folder (default: evals/<env>@<version>/<model>)")
    .option("--overwrite", "start over instead of resuming")
    .option("--pass-threshold <x>", "a sample passes (pass@k) when reward >= x", num(Number.NEGATIVE_INFINITY), 1)
    .option("--server <address>", "verifiers:<name>: the env-server, tcp://host:port")
    .option("--url <url>", "openenv:<name>: the OpenEnv server, ws://host:port")
    .option("--tasks <file>", "verifiers:<name>: the split's tasks, a JSON-lines file of task data")
    .option("--env-version <v>", "verifiers:<name>: the version recorded (the server reports none)", "0.0.0")
    .option("--deadline-ms <ms>", "remote: one rollout at most this long, then cancelled on the server", int(1), 300_000)
    .option("--json", "print the summary as JSON")
    .option("--no-progress", "no progress bar")
    .action(async (spec: string, flags: EvalFlags) => {
      await evalAction(spec, flags, deps);
    });
}

async function evalAction(spec: string, flags: EvalFlags, deps: EvalCommandDeps): Promise<void> {
  if (!!flags.checkpoint === !!flags.baseUrl) throw new UsageError("give exactly one of --checkpoint <path> or --base-url <url>");
  if (flags.baseUrl && !flags.model) throw new UsageError("--base-url needs --model <name>");
  const envArgs = Object.keys(flags.envArgs).length > 0 || !flags.checkpoint ? flags.envArgs : (runEnvArgs(flags.checkpoint, spec) ?? flags.envArgs);
  const env = isRemoteEnvironmentId(spec) ? await remoteEnvironment(spec, flags, envArgs) : await resolveEnvironment(spec, envArgs);
  const { model, modelTag } = await modelOf(flags, deps);
  // A verifiers env-server calls the model itself: serve ours to it over vLLM's generate route.
  const endpoint = env.remote?.needsEndpoint
    ? await EndpointServer.start({ limits: { vocabSize: model.tokenizer.vocabSize, contextTokens: Number.POSITIVE_INFINITY } })
    : undefined;
  const natsUrl = flags.nats ?? process.env["NATS_URL"];
  const sandbox = natsUrl ? await (deps.makeSandbox ?? natsSandbox)(natsUrl) : undefined;
  // Another split's results go beside the eval split's, not over them (a folder resumes one split only).
  const folder = modelTag.replace(/[^\w.@-]+/g, "_") + (flags.split === "eval" ? "" : `-${flags.split}`);
  const outDir = flags.out ?? join("evals", `${env.name}@${env.version}`, folder);

  const ac = new AbortController();
  const onSigint = abortOnSigint(ac);
  process.on("SIGINT", onSigint);
  const bar = progressBar(flags);
  try {
    const report = await runEval({
      env,
      model,
      sampling: samplingOf(flags),
      outDir,
      n: flags.numExamples,
      rollouts: flags.rollouts,
      concurrency: flags.concurrency,
      split: flags.split,
      sandbox: sandbox?.sandbox,
      endpoint,
      signal: ac.signal,
      passThreshold: flags.passThreshold,
      overwrite: flags.overwrite,
      info: {
        model: flags.checkpoint ? { checkpoint: resolve(flags.checkpoint) } : { baseUrl: flags.baseUrl, model: flags.model },
        envArgs,
        argv: process.argv.slice(2),
      },
      onProgress: bar.onProgress,
    });
    bar.stop();
    printReport(report, flags, outDir);
  } finally {
    bar.stop();
    process.off("SIGINT", onSigint);
    await sandbox?.close();
    await endpoint?.close();
    await env.close?.();
  }
}

/** A verifiers or OpenEnv server named on the command line, as the run config's entry would name it. */
async function remoteEnvironment(spec: string, flags: EvalFlags, args: Record<string, unknown>): Promise<Environment> {
  if (spec.startsWith("verifiers:") && (!flags.server || !flags.tasks)) throw new UsageError(`${spec} needs --server tcp://host:port and --tasks <file.jsonl>`);
  if (spec.startsWith("openenv:") && !flags.url) throw new UsageError(`${spec} needs --url ws://host:port`);
  const tasks = flags.tasks ? { train: flags.tasks, eval: flags.tasks } : undefined;
  return loadRemoteEnvironment({
    id: spec,
    server: flags.server,
    url: flags.url,
    tasks,
    version: flags.envVersion ?? "0.0.0",
    deadlineMs: flags.deadlineMs,
    retries: 2,
    connectMs: 30_000,
    args,
  });
}

function samplingOf(flags: EvalFlags): SamplingArgs {
  return {
    temperature: flags.temperature,
    topP: flags.topP,
    topK: flags.topK,
    maxTokens: flags.maxTokens,
    ...(flags.stop?.length ? { stop: flags.stop } : {}),
  };
}

/** The model evaluated, and its tag in the output folder's name: the checkpoint's folder, or the endpoint's model name. */
async function modelOf(flags: EvalFlags, deps: EvalCommandDeps): Promise<{ model: ModelClient; modelTag: string }> {
  if (flags.checkpoint) {
    const model = await deps.makeCheckpointClient(flags.checkpoint, { threads: flags.threads, seed: flags.seed });
    return { model, modelTag: basename(resolve(flags.checkpoint)) };
  }
  const tokenizer = await (deps.loadTokenizer ?? defaultTokenizer)(flags.tokenizer);
  const model = new OpenAICompletionsClient({ baseUrl: flags.baseUrl!, model: flags.model!, tokenizer, apiKey: flags.apiKey ?? process.env["OPENAI_API_KEY"] });
  return { model, modelTag: flags.model! };
}

/** Ctrl-C once aborts the evaluation, which still finishes its writes (so it resumes); twice quits at once. */
function abortOnSigint(ac: AbortController): () => void {
  return () => {
    if (ac.signal.aborted) process.exit(130);
    process.stderr.write("\ninterrupted: finishing writes (Ctrl-C again to quit now)\n");
    ac.abort(new Error("interrupted"));
  };
}

/** A bar on stderr, started by the first report (which knows the total); none without a TTY or with --no-progress. */
function progressBar(flags: EvalFlags): { onProgress(p: EvalProgress): void; stop(): void } {
  const bar =
    flags.progress && process.stderr.isTTY
      ? new cliProgress.SingleBar(
          { format: "eval [{bar}] {value}/{total} rollouts | reward {reward} | {eta_formatted} left", hideCursor: true, stream: process.stderr },
          cliProgress.Presets.shades_classic,
        )
      : null;
  let started = false;
  return {
    onProgress: (p) => {
      if (!bar) return;
      if (!started) {
        bar.start(p.total, p.done, { reward: "-" });
        started = true;
      }
      bar.update(p.done, { reward: p.scored ? p.rewardMean.toFixed(3) : "-" });
    },
    stop: () => bar?.stop(),
  };
}

/** The summary on stdout (JSON with --json); where the results are, and an interruption (exit code 130), on stderr. */
function printReport(report: EvalReport, flags: EvalFlags, outDir: string): void {
  if (flags.json) process.stdout.write(JSON.stringify({ ...report.summary, sampling: samplingOf(flags) }, null, 2) + "\n");
  else process.stdout.write(`${samplingLine(flags)}\n${formatSummary(report.summary)}\n`);
  if (report.resumed) process.stderr.write(`resumed ${report.resumed} finished rollouts from ${outDir}\n`);
  process.stderr.write(`results: ${join(outDir, "results.jsonl")}\n`);
  if (report.interrupted) {
    process.stderr.write("interrupted: run the same command again to resume\n");
    process.exitCode = 130;
  }
}

/** Which decoding the figures come from: `train`'s held-out pass@1 is greedy, and this command samples by default. */
export function samplingLine(flags: Pick<EvalFlags, "temperature" | "topP" | "topK" | "rollouts">): string {
  if (flags.temperature === 0) return `decoding    greedy (temperature 0), as the run's evaluator: pass@1 comparable with train's held-out pass@1`;
  return `decoding    sampled: temperature ${flags.temperature}, top-p ${flags.topP}, top-k ${flags.topK}, ${flags.rollouts} rollouts per example (train's held-out pass@1 is greedy: --temperature 0 -r 1 gives that figure)`;
}

/**
 * A run checkpoint is evaluated on the environment as the run trained on it: the args of the run config's
 * entry for that environment (its digits, its format reward, ...), unless -a names others.
 */
function runEnvArgs(checkpoint: string, spec: string): Record<string, unknown> | null {
  const configPath = runConfigPathOf(checkpoint);
  if (!isRunCheckpoint(checkpoint) || !existsSync(configPath)) return null;
  const name = spec.split("@")[0];
  const entries = loadRunConfig(configPath).environments.filter((e) => e.id.split("@")[0] === name);
  if (entries.length === 0) return null;
  const args = entries[0]!.args ?? {};
  process.stderr.write(
    `environment args from the run's config (${configPath}${entries.length > 1 ? `, entry "${entries[0]!.key ?? name}" of ${entries.length}` : ""}): ${JSON.stringify(args)}; -a overrides\n`,
  );
  return args;
}

async function defaultTokenizer(spec: string): Promise<TokenizerLike> {
  const { loadTokenizer } = await import("../../kernels/tokenizer.js");
  if (spec === "byte") return loadTokenizer({ kind: "byte" });
  if (spec.startsWith("hf:")) return loadTokenizer({ kind: "hf", path: spec.slice(3) });
  throw new UsageError(`--tokenizer must be "byte" or "hf:<path>", got "${spec}"`);
}

async function natsSandbox(url: string): Promise<{ sandbox: CodeSandbox; close(): Promise<void> }> {
  const { connect } = await import("@nats-io/transport-node");
  const { NatsSandboxClient } = await import("../../streams/index.js");
  const nc = await connect({ servers: url });
  return { sandbox: new NatsSandboxClient(nc), close: () => nc.drain() };
}
