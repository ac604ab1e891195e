// The model `rollstream serve` starts with: a folder (an HF folder or a run checkpoint, as `rollstream eval
// --checkpoint` loads them), or a run's weights in its NATS object store (the run config gives the model and
// tokenizer; the version is the one asked for, else the run's current policy version). A server started on a run
// keeps its connection, so POST /update_weights {version} can load any later version of that run.
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { Kvm } from "@nats-io/kv";
import type { PolicyModel } from "../kernels/index.js";
import type { ModelConfig } from "../kernels/model-config.js";
import type { Tokenizer } from "../kernels/tokenizer.js";
import { loadRunConfig, type RunConfig } from "../actors/runtime/config.js";
import { createPolicyModel, createTokenizer, modelConfigOf } from "../actors/runtime/model-factory.js";
import { loadModelFolder } from "../actors/runtime/model-folder.js";
import { openWire, RunChannels, RunState, runNames, StateKeys } from "../streams/index.js";
import type { StoreWeights } from "./weight-loads.js";

export interface ServedModel {
  model: PolicyModel;
  tokenizer: Tokenizer;
  modelConfig: ModelConfig;
  /** The weight version label it starts with. */
  label: string;
  /** Where the weights came from, for the update log. */
  source: string;
  /** The run's config, when there is one (its engine settings apply). */
  runConfig?: RunConfig;
  store?: StoreWeights;
  close(): Promise<void>;
}

export type ServeSource = { kind: "folder"; path: string } | { kind: "run"; configPath: string; natsUrl: string; version?: number };

export async function openServedModel(src: ServeSource, opts: { threads?: number; label?: string }): Promise<ServedModel> {
  if (src.kind === "folder") {
    const f = loadModelFolder(src.path, { threads: opts.threads });
    const label = opts.label ?? String(f.version);
    return { ...f, label, source: src.path, close: async () => undefined };
  }
  const runConfig = loadRunConfig(src.configPath);
  const nc = await connect({ servers: src.natsUrl, name: `rollstream-serve-${runConfig.run}` });
  try {
    const weights = new RunChannels(openWire(nc, runConfig.run)).weights;
    const version = src.version ?? (await currentVersion(nc, runConfig.run));
    const bytes = await weights.fetch(version);
    const model = createPolicyModel(runConfig, { threads: opts.threads });
    model.loadSafetensors(bytes);
    return {
      model,
      tokenizer: createTokenizer(runConfig),
      modelConfig: modelConfigOf(runConfig),
      label: opts.label ?? String(version),
      source: `run ${runConfig.run} v${version}`,
      runConfig,
      store: (v) => weights.fetch(v),
      close: () => nc.drain(),
    };
  } catch (e) {
    await nc.close();
    throw e;
  }
}

async function currentVersion(nc: NatsConnection, run: string): Promise<number> {
  const kv = await new Kvm(nc).open(runNames(run).kvBucket).catch((e: Error) => {
    throw new Error(`run ${run} has no state at this NATS server (${e.message}); is the run name right?`);
  });
  const v = await new RunState(kv).get(StateKeys.policyVersion);
  if (v === undefined || v < 0) throw new Error(`run ${run} has no policy version yet; give --version or wait for its first weights`);
  return v;
}
