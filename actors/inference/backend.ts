// The inference actor's engine, whichever it is: the in-process PolicyEngine (backend local), or a fleet of
// external servers (rollstream, sglang, vllm) behind the same ModelClient interface. The actor asks it for the
// rollouts' clients, tells it about new policy versions, and reads which version it serves.
import type { ModelClient } from "../../environments/api/model.js";
import type { Tokenizer } from "../../kernels/tokenizer.js";
import type { EngineFigures, Task, WeightsChannel } from "../../streams/index.js";
import type { ActorContext } from "../runtime/actor.js";
import { createPolicyModel, modelConfigOf } from "../runtime/model-factory.js";
import { engineOptionsOf, exitWedged, PolicyEngine } from "../runtime/policy-engine.js";
import { Fleet } from "./fleet/fleet.js";
import { HfExporter } from "./fleet/hf-export.js";
import type { EngineServer } from "./fleet/engine-server.js";
import { SglangServer } from "./fleet/sglang.js";
import { RollstreamServer, VllmServer } from "./fleet/vllm.js";
import { CoalescingServer } from "./fleet/coalesce.js";

export interface InferenceBackend {
  /** The policy version served: once swapWeights resolved, every server in rotation has it. */
  readonly version: number;
  /** The newest version handed over by swapWeights (the local engine applies it at its next step boundary); default version. */
  readonly latestVersion?: number;
  /** The local engine's scheduler figures (heartbeat, Prometheus). */
  figures?(): EngineFigures;
  /** Tokens sampled so far (for throughput metrics). */
  readonly generatedTokens: number;
  /** Moves to `version` (a lower one when a restored learner rolled the run back). */
  swapWeights(version: number, safetensors: Uint8Array, rollback: boolean): void | Promise<void>;
  /** One client per rollout of the task, in order: a fleet keeps all turns of one rollout on one server. */
  rolloutClients(task: Task): ModelClient[];
}

/** The in-process engine: the task's rollouts share one client, whose seeds follow on from task.seed. */
class LocalBackend implements InferenceBackend {
  constructor(private readonly engine: PolicyEngine) {}
  get version(): number {
    return this.engine.version;
  }
  get latestVersion(): number {
    return this.engine.latestVersion;
  }
  get generatedTokens(): number {
    return this.engine.generatedTokens;
  }
  figures(): EngineFigures {
    return this.engine.figures();
  }
  swapWeights(version: number, safetensors: Uint8Array, rollback: boolean): void {
    this.engine.swapWeights(version, safetensors, rollback);
  }
  rolloutClients(task: Task): ModelClient[] {
    const client = this.engine.client(task.seed);
    return Array.from({ length: task.groupSize }, () => client);
  }
}

/** The backend the run config names, serving policy `version` (its weights `safetensors`) when this resolves. */
export async function openBackend(
  ctx: ActorContext,
  tokenizer: Tokenizer,
  version: number,
  safetensors: Uint8Array,
  weights: WeightsChannel,
): Promise<InferenceBackend> {
  const { config } = ctx;
  const inf = config.actors.inference;
  if (inf.backend === "local") {
    const model = createPolicyModel(config, { threads: inf.threads, log: ctx.log });
    model.loadSafetensors(safetensors);
    const engine = new PolicyEngine(model, tokenizer, version, {
      ...engineOptionsOf(config),
      seed: config.rl.seed,
      onWedged: (e) => exitWedged(ctx, e),
      onWeightsApplied: (w) => ctx.log.debug(w, "weights in use"),
      onWeightsError: (e, v) => ctx.log.error({ version: v, err: e.message }, "new weights could not be loaded; keeping the current ones"),
    });
    ctx.log.info({ weightUpdate: inf.weightUpdate }, "local engine: continuous batching");
    return new LocalBackend(engine);
  }
  const kind = inf.backend;
  const deadline = inf.weightsDeadlineMs;
  const adapters =
    config.model.lora?.ship === "adapter"
      ? {
          adapter: (v: number) => weights.fetchAdapter(v, deadline),
          base: (sha: string) => weights.fetchLoraBase(sha, deadline),
          keep: config.weights.keepVersions,
        }
      : undefined;
  const fleet = new Fleet({
    adapters,
    servers: inf.servers.map((url) => serverFor(kind, url.replace(/\/+$/, ""), inf.fleet)),
    tokenizer,
    contextTokens: modelConfigOf(config).maxPositionEmbeddings,
    run: config.run,
    settings: inf.fleet,
    exporter: HfExporter.forRun(config, ctx.runDir),
    log: ctx.log,
    metrics: ctx.metrics,
    signal: ctx.signal,
  });
  ctx.log.info({ backend: inf.backend, servers: inf.servers }, "inference fleet");
  await fleet.start(version, safetensors);
  return fleet;
}

function serverFor(
  kind: "rollstream" | "sglang" | "vllm",
  url: string,
  f: { vllmPauseMode: "abort" | "wait" | "keep"; vllmWeightsRoute: string },
): EngineServer {
  const vllm = { pauseMode: f.vllmPauseMode, weightsRoute: f.vllmWeightsRoute };
  if (kind === "sglang") return new SglangServer(url);
  // rollstream serve takes n choices per request: a group's rollouts starting together share one request.
  return kind === "vllm" ? new VllmServer(url, vllm) : new CoalescingServer(new RollstreamServer(url, vllm));
}
