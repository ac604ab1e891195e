// Where new weights come from: an HF folder (config.json + model.safetensors, as the inference actor exports each
// version and as SGLang's update_weights_from_disk reads one), or a version in the run's object store. A folder
// whose config describes another model is refused before its bytes are read: the served model's shapes are fixed.
import { existsSync } from "node:fs";
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { fromHfConfig } from "../kernels/hf-config.js";
import { hasHfWeights, readHfWeights, WEIGHTS_FILE, WEIGHTS_INDEX_FILE } from "../kernels/hf-weights.js";
import type { ModelConfig } from "../kernels/model-config.js";
import { writeSafetensors } from "../kernels/safetensors.js";
import { BadRequest } from "./http-errors.js";

/** A run's weights by version (the object store), when the server was started on a run. */
export type StoreWeights = (version: number) => Promise<Uint8Array>;

/**
 * The folder's weights as one safetensors file (its model.safetensors, or its shards merged), once its config.json
 * is known to describe `served`.
 */
export async function folderWeights(dir: string, served: ModelConfig): Promise<() => Promise<Uint8Array>> {
  const configPath = join(dir, "config.json");
  const weightsPath = join(dir, WEIGHTS_FILE);
  if (!existsSync(configPath) || !hasHfWeights(dir))
    throw new BadRequest(`${dir}: not an HF model folder (needs config.json and model.safetensors or ${WEIGHTS_INDEX_FILE})`);
  let cfg: ModelConfig;
  try {
    cfg = fromHfConfig(JSON.parse(await readFile(configPath, "utf8")));
  } catch (e) {
    throw new BadRequest(`${configPath}: ${(e as Error).message}`);
  }
  const differs = (Object.keys(served) as (keyof ModelConfig)[]).filter((k) => JSON.stringify(cfg[k]) !== JSON.stringify(served[k]));
  if (differs.length > 0) {
    const what = differs.map((k) => `${k} ${JSON.stringify(cfg[k])} (served: ${JSON.stringify(served[k])})`).join(", ");
    throw new BadRequest(`${dir}: another model than the one served: ${what}`);
  }
  if (existsSync(weightsPath)) return async () => new Uint8Array(await readFile(weightsPath));
  return async () => {
    try {
      return writeSafetensors([...readHfWeights(dir)].map(([name, t]) => ({ name, shape: t.shape, data: t.data })));
    } catch (e) {
      throw new BadRequest((e as Error).message);
    }
  };
}
