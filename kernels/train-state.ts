// The learner's full training state as one safetensors blob: weights under their HF names, AdamW
// moments, and the counters that make a restored run continue exactly (step, stream position, ...).
// With LoRA the weights are the frozen base, and the adapters, their moments and settings come beside them (no
// moments for the base): the model is restored merged.
import { readSafetensors, readSafetensorsMetadata, writeSafetensors } from "./safetensors.js";
import type { OptimizerState, PolicyModel } from "./index.js";
import { LoraAdapters, LoraSchema, loraTargets } from "./lora.js";
import { adapterValues, peftTensors } from "./lora-peft.js";

export interface TrainCounters {
  /** RL optimizer steps done (= current policy version). */
  step: number;
  sftDone: boolean;
  /** Next sequence of the scored subject to read. */
  readerSeq: number;
  droppedStale: number;
  samplesSeen: number;
  optimizerStep: number;
  /**
   * rl.staleness pace: sequences at or past readerSeq that were already trained on (readerSeq is then the
   * first message the learner still held). A restored learner passes them over. Absent: none.
   */
  consumedAhead?: number[];
}

/**
 * `lora`: the adapters trained (their base is what is saved as the model); `baseModel` names that base in their PEFT
 * export. `moments`: the whole optimizer state when the model keeps only a ZeRO-1 slice of it (learner ranks), or
 * "fresh": none written, the reader starts zero moments (a learner group's first state: no rank ever holds them whole).
 */
export function encodeTrainState(
  model: PolicyModel,
  counters: TrainCounters,
  lora?: LoraAdapters | null,
  baseModel = "",
  moments?: OptimizerState | "fresh",
): Uint8Array {
  const params = lora ? lora.baseOf(model.getParams()) : model.getParams();
  const tensors = model.tensors().map((t) => ({ name: t.name, shape: t.shape, data: params.subarray(t.offset, t.offset + t.size) }));
  const meta: Record<string, string> = { format: "rollstream-train-state-1" };
  let optimizerStep: number;
  if (lora) {
    tensors.push(...peftTensors(lora));
    tensors.push({ name: "lora.m", shape: [lora.m.length], data: lora.m });
    tensors.push({ name: "lora.v", shape: [lora.v.length], data: lora.v });
    meta.lora = JSON.stringify(lora.settings);
    meta.loraBaseModel = baseModel;
    optimizerStep = lora.step;
  } else if (moments === "fresh") {
    meta.optimizer = "fresh";
    optimizerStep = 0;
  } else {
    const opt = moments ?? model.exportOptimizerState();
    tensors.push({ name: "optimizer.m", shape: [opt.m.length], data: opt.m });
    tensors.push({ name: "optimizer.v", shape: [opt.v.length], data: opt.v });
    optimizerStep = opt.step;
  }
  for (const [k, v] of Object.entries({ ...counters, optimizerStep })) if (v !== undefined) meta[k] = Array.isArray(v) ? v.join(",") : String(v);
  return writeSafetensors(tensors, meta);
}

export function decodeTrainState(model: PolicyModel, bytes: Uint8Array): TrainCounters {
  return decodeTrainStateWithLora(model, bytes).counters;
}

/** The counters, and the adapters when the state was LoRA training (the model then holds the merged weights). */
export function decodeTrainStateWithLora(model: PolicyModel, bytes: Uint8Array): { counters: TrainCounters; lora: LoraAdapters | null } {
  const meta = readSafetensorsMetadata(bytes);
  if (meta.format !== "rollstream-train-state-1") throw new Error(`not a rollstream training state (format ${meta.format ?? "missing"})`);
  const tensors = readSafetensors(bytes);
  const params = new Float32Array(model.numParams);
  for (const t of model.tensors()) {
    const got = tensors.get(t.name);
    if (!got) throw new Error(`training state lacks tensor ${t.name}`);
    if (got.data.length !== t.size) throw new Error(`training state tensor ${t.name} has ${got.data.length} values, model expects ${t.size}`);
    params.set(got.data, t.offset);
  }
  const num = (k: string) => {
    const x = Number(meta[k]);
    if (!Number.isFinite(x)) throw new Error(`training state metadata ${k} is missing or not a number`);
    return x;
  };
  const lora = meta.lora ? restoreAdapters(model, params, meta.lora, tensors, num("optimizerStep")) : null;
  if (lora) model.setParams(lora.merged(params));
  else {
    model.setParams(params);
    const m = tensors.get("optimizer.m");
    const v = tensors.get("optimizer.v");
    if (meta.optimizer === "fresh") model.resetOptimizer();
    else if (!m || !v) throw new Error("training state lacks optimizer moments");
    else model.importOptimizerState({ m: Float32Array.from(m.data), v: Float32Array.from(v.data), step: num("optimizerStep") });
  }
  const counters: TrainCounters = {
    step: num("step"),
    sftDone: meta.sftDone === "true",
    readerSeq: num("readerSeq"),
    droppedStale: num("droppedStale"),
    samplesSeen: num("samplesSeen"),
    optimizerStep: num("optimizerStep"),
    ...(meta.consumedAhead ? { consumedAhead: meta.consumedAhead.split(",").map(Number) } : {}),
  };
  return { counters, lora };
}

function restoreAdapters(
  model: PolicyModel,
  base: Float32Array,
  settingsJson: string,
  tensors: ReturnType<typeof readSafetensors>,
  step: number,
): LoraAdapters {
  const settings = LoraSchema.parse(JSON.parse(settingsJson));
  const get = (name: string) => {
    const t = tensors.get(name);
    if (!t) throw new Error(`training state lacks ${name}`);
    return Float32Array.from(t.data);
  };
  const targets = loraTargets(model.tensors(), settings);
  const lora = new LoraAdapters(
    settings,
    targets,
    base,
    adapterValues(targets, settings.rank, (n) => tensors.get(n), "training state"),
  );
  lora.m.set(get("lora.m"));
  lora.v.set(get("lora.v"));
  lora.step = step;
  return lora;
}

/**
 * A state's whole-model moments apart from the rest (learner ranks: followers take only their slice of them), or null
 * when it has none to split (a fresh or a LoRA state). `slim` decodes to the same weights and counters with zero moments.
 */
export function splitMoments(bytes: Uint8Array): { slim: Uint8Array; m: Float32Array; v: Float32Array; step: number } | null {
  const meta = readSafetensorsMetadata(bytes);
  if (meta.optimizer === "fresh" || meta.lora) return null;
  const tensors = readSafetensors(bytes);
  const m = tensors.get("optimizer.m");
  const v = tensors.get("optimizer.v");
  if (!m || !v) return null;
  const rest = [...tensors].filter(([name]) => name !== "optimizer.m" && name !== "optimizer.v");
  const slim = writeSafetensors(
    rest.map(([name, t]) => ({ name, shape: t.shape, data: t.data })),
    { ...meta, optimizer: "fresh" },
  );
  return { slim, m: m.data, v: v.data, step: Number(meta.optimizerStep) };
}
