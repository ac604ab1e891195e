// vLLM's runtime LoRA routes, as vllm-project/vllm serves them with VLLM_ALLOW_RUNTIME_LORA_UPDATING=True
// (vllm/frontend/entrypoints/serve/lora/api_router.py and openai/models/serving.py @055e47c OpenAIServingModels):
// POST /v1/load_lora_adapter {lora_name, lora_path, load_inplace?} → 200 "Success: LoRA adapter '<name>' added
// successfully." (text), 400 when the name is loaded already (without load_inplace); POST /v1/unload_lora_adapter
// {lora_name} → 200 text, 404 "The lora adapter '<name>' cannot be found."; a request naming a model that is neither
// the base nor a loaded adapter is a 404 "The model `<name>` does not exist." (check_model).
// Our engine serves one set of weights at a time, so an adapter is merged: loading one merges its PEFT folder into
// the base (the last full-weight load, or the startup weights) and swaps the merged weights in, labelled with the
// adapter's name, as an in-flight update (requests in flight go on under it, their spans say so). A request that
// names an older loaded adapter is served by the newest one's weights, and its weight_versions spans say which: the
// labels are the truth, never the name asked for.
import { existsSync } from "node:fs";
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import type { FastifyInstance } from "fastify";
import { z } from "zod";
import { fromPeft, PEFT_CONFIG_FILE, PEFT_WEIGHTS_FILE, paramsSafetensors } from "../kernels/lora-peft.js";
import { readSafetensors } from "../kernels/safetensors.js";
import { BadRequest, parseWith } from "./http-errors.js";
import type { PolicyTokenEngine } from "./policy-token-engine.js";

export interface TensorLayout {
  tensors: readonly { name: string; shape: number[]; offset: number; size: number }[];
  numParams: number;
}

const LoadLoRAAdapterRequest = z.object({
  lora_name: z.string(),
  lora_path: z.string(),
  load_inplace: z.boolean().default(false),
  is_3d_lora_weight: z.literal(false, { message: "3-D LoRA weights (MoE experts) are not served" }).optional(),
});
const UnloadLoRAAdapterRequest = z.object({ lora_name: z.string(), lora_int_id: z.number().int().nullable().optional() });

/** The adapters loaded on a server, by name, and what answers "does this server serve model X". */
export class LoraRegistry {
  /** name → folder, in load order. */
  readonly loaded = new Map<string, string>();

  constructor(readonly baseName: string) {}

  /** A 404 (vLLM's check_model) unless `model` is absent, the base, or a loaded adapter. */
  check(model: string | null | undefined, field = "model"): void {
    if (!model || model === this.baseName || this.loaded.has(model)) return;
    throw new BadRequest(`${field}: The model \`${model}\` does not exist.`, 404);
  }
}

/** The base's safetensors as the model's flat params (its own tensor layout). */
function flatParams(base: Uint8Array, layout: TensorLayout): Float32Array {
  const file = readSafetensors(base);
  const flat = new Float32Array(layout.numParams);
  for (const t of layout.tensors) {
    const x = file.get(t.name);
    if (!x) throw new Error(`the base weights lack ${t.name}`);
    flat.set(x.data, t.offset);
  }
  return flat;
}

/** The PEFT folder merged into `base`: full safetensors the engine loads. */
export async function mergedAdapter(dir: string, base: Uint8Array, layout: TensorLayout): Promise<Uint8Array> {
  const configPath = join(dir, PEFT_CONFIG_FILE);
  const weightsPath = join(dir, PEFT_WEIGHTS_FILE);
  if (!existsSync(configPath) || !existsSync(weightsPath))
    throw new BadRequest(`${dir}: not a PEFT adapter folder (needs ${PEFT_CONFIG_FILE} and ${PEFT_WEIGHTS_FILE})`);
  const [config, weights] = await Promise.all([readFile(configPath, "utf8"), readFile(weightsPath)]);
  let adapters: ReturnType<typeof fromPeft>;
  const baseParams = flatParams(base, layout);
  try {
    adapters = fromPeft(config, new Uint8Array(weights), { tensors: [...layout.tensors], base: baseParams });
  } catch (e) {
    throw new BadRequest(`${dir}: ${(e as Error).message}`);
  }
  return paramsSafetensors(layout.tensors, adapters.merged(baseParams));
}

export function registerLoraRoutes(app: FastifyInstance, d: { engine: PolicyTokenEngine; registry: LoraRegistry; layout: TensorLayout }): void {
  app.post("/v1/load_lora_adapter", async (req, reply) => {
    const b = parseWith(LoadLoRAAdapterRequest, req.body, "body");
    if (!b.lora_name || !b.lora_path) throw new BadRequest("Both 'lora_name' and 'lora_path' must be provided.");
    if (!b.load_inplace && d.registry.loaded.has(b.lora_name))
      throw new BadRequest(`The lora adapter '${b.lora_name}' has already been loaded. If you want to load the adapter in place, set 'load_inplace' to True.`);
    const merged = await mergedAdapter(b.lora_path, await d.engine.baseWeights(), d.layout);
    await d.engine.load(async () => merged, b.lora_name, { abortAll: false, source: b.lora_path, adapter: true });
    d.registry.loaded.set(b.lora_name, b.lora_path);
    return reply.code(200).type("text/plain").send(`Success: LoRA adapter '${b.lora_name}' added successfully.`);
  });
  app.post("/v1/unload_lora_adapter", async (req, reply) => {
    const b = parseWith(UnloadLoRAAdapterRequest, req.body, "body");
    if (!b.lora_name) throw new BadRequest("'lora_name' needs to be provided to unload a LoRA adapter.");
    if (!d.registry.loaded.delete(b.lora_name)) throw new BadRequest(`The lora adapter '${b.lora_name}' cannot be found.`, 404);
    return reply.code(200).type("text/plain").send(`Success: LoRA adapter '${b.lora_name}' removed successfully.`);
  });
}
