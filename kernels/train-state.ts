// The learner's full training state as one safetensors blob: weights under their HF names, AdamW
// moments, and the counters that make a restored run continue exactly (step, stream position, ...).
import { readSafetensors, readSafetensorsMetadata, writeSafetensors } from "./safetensors.js";
import type { PolicyModel } from "./index.js";

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

export function encodeTrainState(model: PolicyModel, counters: TrainCounters): Uint8Array {
  const params = model.getParams();
  const opt = model.exportOptimizerState();
  const tensors = model.tensors().map((t) => ({ name: t.name, shape: t.shape, data: params.subarray(t.offset, t.offset + t.size) }));
  tensors.push({ name: "optimizer.m", shape: [opt.m.length], data: opt.m });
  tensors.push({ name: "optimizer.v", shape: [opt.v.length], data: opt.v });
  const meta: Record<string, string> = { format: "rollstream-train-state-1" };
  for (const [k, v] of Object.entries({ ...counters, optimizerStep: opt.step })) if (v !== undefined) meta[k] = Array.isArray(v) ? v.join(",") : String(v);
  return writeSafetensors(tensors, meta);
}

export function decodeTrainState(model: PolicyModel, bytes: Uint8Array): TrainCounters {
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
  model.setParams(params);
  const m = tensors.get("optimizer.m");
  const v = tensors.get("optimizer.v");
  if (!m || !v) throw new Error("training state lacks optimizer moments");
  const num = (k: string) => {
    const x = Number(meta[k]);
    if (!Number.isFinite(x)) throw new Error(`training state metadata ${k} is missing or not a number`);
    return x;
  };
  model.importOptimizerState({ m: Float32Array.from(m.data), v: Float32Array.from(v.data), step: num("optimizerStep") });
  return {
    step: num("step"),
    sftDone: meta.sftDone === "true",
    readerSeq: num("readerSeq"),
    droppedStale: num("droppedStale"),
    samplesSeen: num("samplesSeen"),
    optimizerStep: num("optimizerStep"),
    ...(meta.consumedAhead ? { consumedAhead: meta.consumedAhead.split(",").map(Number) } : {}),
  };
}
