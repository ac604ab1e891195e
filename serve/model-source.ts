// The model `rollstream serve` starts with: a folder (an HF folder or a run checkpoint, as `rollstream eval
// --checkpoint` loads them), or a run's model (the run config gives the model and tokenizer): with its NATS server,
// the weights of the version asked for, else of the run's current policy version, else (a run not started yet)
// its initial weights, as are they without a NATS server: labelled "init" until an inference actor pushes a
// version. A server started on a run's NATS keeps its connection, so POST /update_weights {version} can load any
// later version of that run.
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

export type ServeSource = { kind: "folder"; path: string } | { kind: "run"; configPath: string; natsUrl?: string; version?: number };

export async function openServedModel(src: ServeSource, opts: { threads?: number; label?: string }): Promise<ServedModel> {
  if (src.kind === "folder") {
    const f = loadModelFolder(src.path, { threads: opts.threads });
    const label = opts.label ?? String(f.version);
    return { ...f, label, source: src.path, close: async () => undefined };
  }
  const runConfig = loadRunConfig(src.configPath);
  const base = { tokenizer: createTokenizer(runConfig), modelConfig: modelConfigOf(runConfig), runConfig };
  const model = createPolicyModel(runConfig, { threads: opts.threads });
  if (!src.natsUrl) return { ...base, model, label: opts.label ?? "init", source: `run ${runConfig.run}: initial weights`, close: async () => undefined };
  const nc = await connect({ servers: src.natsUrl, name: `rollstream-serve-${runConfig.run}` });
  try {
    const weights = new RunChannels(openWire(nc, runConfig.run)).weights;
    const version = src.version ?? (await currentVersion(nc, runConfig.run));
    if (version !== null) model.loadSafetensors(await weights.fetch(version));
    return {
      ...base,
      model,
      label: opts.label ?? (version === null ? "init" : String(version)),
      source: version === null ? `run ${runConfig.run}: initial weights (no version yet)` : `run ${runConfig.run} v${version}`,
      store: (v) => weights.fetch(v),
      close: () => nc.drain(),
    };
  } catch (e) {
    model.dispose();
    await nc.close();
    throw e;
  }
}

/** The run's current policy version; null when it has none yet (not started, or still in SFT). */
async function currentVersion(nc: NatsConnection, run: string): Promise<number | null> {
  const kv = await new Kvm(nc).open(runNames(run).kvBucket).catch(() => null);
  if (!kv) return null;
  const v = await new RunState(kv).get(StateKeys.policyVersion);
  return v === undefined || v < 0 ? null : v;
}
