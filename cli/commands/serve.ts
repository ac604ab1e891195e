// `rollstream serve`: an inference server over rollstream's engine (serve/): vLLM's /inference/v1/generate,
// OpenAI /v1/completions and /v1/chat/completions, SGLang's /generate and /update_weights_from_disk, pause and
// resume, /metrics. The model comes from a folder (--checkpoint: an HF folder or a run checkpoint) or from a run's
// object store (--config with --nats, at --version or the run's current one). It prints its URL on stdout once it
// listens, and stops on SIGINT/SIGTERM.
import { InvalidArgumentError, type Command } from "commander";
import { createLogger, LastLogLine } from "../../actors/runtime/logger.js";
import { startServe } from "../../serve/start.js";
import type { ServeSource } from "../../serve/model-source.js";
import { UsageError } from "../errors.js";

interface ServeFlags {
  checkpoint?: string;
  config?: string;
  nats?: string;
  version?: number;
  host: string;
  port: number;
  modelName?: string;
  weightVersion?: string;
  threads?: number;
  seed?: number;
  weightUpdate?: "keep" | "recompute" | "barrier";
  maxSeqs?: number;
  kvBlocks?: number;
  updateLog?: string;
}

const int = (min: number) => (v: string) => {
  const n = Number(v);
  if (!Number.isInteger(n) || n < min) throw new InvalidArgumentError(`expected an integer >= ${min}, got "${v}"`);
  return n;
};

export function registerServeCommand(program: Command): void {
  program
    .command("serve")
    .description("serve a model over HTTP: vLLM's token route, OpenAI completions and chat, SGLang's routes, weight updates")
    .option("--checkpoint <path>", "an HF folder (config.json + model.safetensors) or a run checkpoint (runs/<run>/checkpoints/step-N)")
    .option("-c, --config <file>", "a run config: serve that run's model (its current weights from --nats, else its initial ones until a version is pushed)")
    .option("--nats <url>", "the run's NATS server, with --config (default: NATS_URL)")
    .option("--version <n>", "the run's policy version to start with (default: its current one)", int(0))
    .option("--host <host>", "address to bind", "127.0.0.1")
    .option("--port <port>", "port (0: any free one)", int(0), 8000)
    .option("--model-name <name>", "the model name answers carry (default: the folder's or run's name)")
    .option("--weight-version <label>", "label of the first weights (default: the checkpoint's step or run version)")
    .option("--threads <n>", "CPU threads", int(1))
    .option("--seed <n>", "base sampling seed of requests that give none", int(0))
    .option("--weight-update <mode>", "in-flight requests during an update without abort: keep | recompute | barrier", (v: string) => {
      if (v !== "keep" && v !== "recompute" && v !== "barrier") throw new InvalidArgumentError(`expected keep, recompute or barrier, got "${v}"`);
      return v;
    })
    .option("--max-seqs <n>", "sequences decoded together", int(1))
    .option("--kv-blocks <n>", "KV blocks in the engine's pool", int(1))
    .option("--update-log <file>", "append each weight load (version, source, time, duration) to this file as a JSON line")
    .action(async (flags: ServeFlags) => {
      await serve(flags);
    });
}

function sourceOf(flags: ServeFlags): ServeSource {
  if (!!flags.checkpoint === !!flags.config) throw new UsageError("give exactly one of --checkpoint <path> or --config <run config>");
  if (flags.checkpoint) return { kind: "folder", path: flags.checkpoint };
  const natsUrl = flags.nats ?? process.env["NATS_URL"];
  if (flags.version !== undefined && !natsUrl) throw new UsageError("--version reads the run's object store: give --nats <url> (or NATS_URL)");
  return { kind: "run", configPath: flags.config!, ...(natsUrl ? { natsUrl } : {}), ...(flags.version === undefined ? {} : { version: flags.version }) };
}

async function serve(flags: ServeFlags): Promise<void> {
  const log = createLogger({ actor: "serve" }, undefined, new LastLogLine());
  const server = await startServe({
    source: sourceOf(flags),
    host: flags.host,
    port: flags.port,
    modelName: flags.modelName,
    weightVersion: flags.weightVersion,
    threads: flags.threads,
    seed: flags.seed,
    weightUpdate: flags.weightUpdate,
    maxSeqs: flags.maxSeqs,
    kvBlocks: flags.kvBlocks,
    updateLog: flags.updateLog,
    log,
  });
  process.stdout.write(`rollstream serve: listening on ${server.url}\n`);
  await new Promise<void>((done) => {
    const stop = () => {
      process.off("SIGINT", stop);
      process.off("SIGTERM", stop);
      void server.close().finally(done);
    };
    process.on("SIGINT", stop);
    process.on("SIGTERM", stop);
  });
}
