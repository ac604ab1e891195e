// Where new weights come from: an HF folder (config.json + model.safetensors, as the inference actor exports each
// version and as SGLang's update_weights_from_disk reads one), or a version in the run's object store. A folder
// whose config describes another model is refused before its bytes are read: the served model's shapes are fixed.
import { existsSync } from "node:fs";
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { fromHfConfig } from "../kernels/hf-config.js";
import type { ModelConfig } from "../kernels/model-config.js";
import { BadRequest } from "./http-errors.js";

/** A run's weights by version (the object store), when the server was started on a run. */
export type StoreWeights = (version: number) => Promise<Uint8Array>;

/** The bytes of the folder's model.safetensors, once its config.json is known to describe `served`. */
export async function folderWeights(dir: string, served: ModelConfig): Promise<() => Promise<Uint8Array>> {
  const configPath = join(dir, "config.json");
  const weightsPath = join(dir, "model.safetensors");
  if (!existsSync(configPath) || !existsSync(weightsPath)) throw new BadRequest(`${dir}: not an HF model folder (needs config.json and model.safetensors)`);
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
  return async () => new Uint8Array(await readFile(weightsPath));
}
