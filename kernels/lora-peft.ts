// LoRA adapters in PEFT's on-disk format (huggingface/peft: tuners/lora/config.py for adapter_config.json,
// utils/save_and_load.py for the tensor names): adapter_config.json with peft_type LORA, r, lora_alpha,
// target_modules, use_rslora...; adapter_model.safetensors with one lora_A.weight [r, in] and lora_B.weight [out, r]
// per adapted module under "base_model.model.<module path>" (the adapter's own name is not in the keys).
import { z } from "zod";
import { LORA_MODULES, LoraAdapters, LoraSchema, loraTargets, type LoraSettings, type LoraTarget } from "./lora.js";
import { readSafetensors, readSafetensorsMetadata, writeSafetensors } from "./safetensors.js";

export const PEFT_CONFIG_FILE = "adapter_config.json";
export const PEFT_WEIGHTS_FILE = "adapter_model.safetensors";

const keyOf = (module: string, which: "A" | "B") => `base_model.model.${module}.lora_${which}.weight`;

/** adapter_config.json's object for these settings. */
export function peftConfig(s: LoraSettings, baseModel: string): Record<string, unknown> {
  return {
    peft_type: "LORA",
    task_type: "CAUSAL_LM",
    base_model_name_or_path: baseModel,
    r: s.rank,
    lora_alpha: s.alpha,
    lora_dropout: s.dropout,
    target_modules: s.targetModules.includes("all-linear") ? [...LORA_MODULES] : [...s.targetModules],
    bias: "none",
    fan_in_fan_out: false,
    use_rslora: s.rsLora,
    use_dora: false,
    init_lora_weights: true,
    inference_mode: true,
    modules_to_save: null,
    layers_to_transform: null,
    rank_pattern: {},
    alpha_pattern: {},
  };
}

/** Flat params (the base the adapters apply to) as safetensors under the model's HF tensor names. */
export function paramsSafetensors(tensors: readonly { name: string; shape: number[]; offset: number; size: number }[], params: Float32Array): Uint8Array {
  return writeSafetensors(tensors.map((t) => ({ name: t.name, shape: t.shape, data: params.subarray(t.offset, t.offset + t.size) })));
}

/** Every adapter matrix under its PEFT name (views into the adapters' buffer). */
export function peftTensors(adapters: LoraAdapters): { name: string; shape: number[]; data: Float32Array }[] {
  const r = adapters.settings.rank;
  return adapters.targets.flatMap((t) => [
    { name: keyOf(t.module, "A"), shape: [r, t.in], data: adapters.params.subarray(t.a, t.a + r * t.in) },
    { name: keyOf(t.module, "B"), shape: [t.out, r], data: adapters.params.subarray(t.b, t.b + t.out * r) },
  ]);
}

/** The adapters as PEFT's two files. */
export function toPeft(adapters: LoraAdapters, baseModel: string): { config: string; weights: Uint8Array } {
  return {
    config: `${JSON.stringify(peftConfig(adapters.settings, baseModel), null, 2)}\n`,
    weights: writeSafetensors(peftTensors(adapters), { format: "pt" }),
  };
}

/** The adapters' values from tensors under PEFT names, in the targets' layout; a missing or misshapen one is an error. */
export function adapterValues(
  targets: LoraTarget[],
  rank: number,
  get: (name: string) => { shape: number[]; data: ArrayLike<number> } | undefined,
  where: string,
): Float32Array {
  const params = new Float32Array(targets.reduce((s, t) => s + rank * (t.in + t.out), 0));
  for (const t of targets) {
    for (const [which, off, shape] of [
      ["A", t.a, [rank, t.in]],
      ["B", t.b, [t.out, rank]],
    ] as const) {
      const x = get(keyOf(t.module, which));
      if (!x) throw new Error(`${where}: ${keyOf(t.module, which)} is missing`);
      if (x.shape.join() !== shape.join()) throw new Error(`${where}: ${keyOf(t.module, which)} has shape [${x.shape}], the model needs [${shape}]`);
      params.set(x.data, off);
    }
  }
  return params;
}

/** A LoRA training state's adapters as the files of a checkpoint's adapter/ folder; none without LoRA. */
export function peftCheckpointFiles(state: Uint8Array): { path: string; data: Uint8Array | string }[] {
  const peft = peftFromTrainState(state);
  if (!peft) return [];
  return [
    { path: `adapter/${PEFT_WEIGHTS_FILE}`, data: peft.weights },
    { path: `adapter/${PEFT_CONFIG_FILE}`, data: peft.config },
  ];
}

/** PEFT's files for a training state written with LoRA (the checkpoint folder's adapter/), or null without LoRA. */
export function peftFromTrainState(state: Uint8Array): { config: string; weights: Uint8Array } | null {
  const meta = readSafetensorsMetadata(state);
  if (!meta.lora) return null;
  const settings = LoraSchema.parse(JSON.parse(meta.lora));
  const tensors = [...readSafetensors(state)]
    .filter(([name]) => /\.lora_[AB]\.weight$/.test(name))
    .map(([name, t]) => ({ name, shape: t.shape, data: Float32Array.from(t.data) }));
  const config = `${JSON.stringify(peftConfig(settings, meta.loraBaseModel ?? ""), null, 2)}\n`;
  return { config, weights: writeSafetensors(tensors, { format: "pt" }) };
}

const PeftConfigSchema = z.object({
  peft_type: z.literal("LORA", { error: "peft_type must be LORA" }),
  r: z.number().int().min(1),
  lora_alpha: z.number().positive(),
  lora_dropout: z.number().min(0).default(0),
  target_modules: z.union([z.array(z.string()), z.string()]),
  bias: z.literal("none", { error: 'only bias "none" adapters load' }).default("none"),
  fan_in_fan_out: z.literal(false, { error: "fan_in_fan_out adapters (Conv1D layouts) do not load" }).default(false),
  use_rslora: z.boolean().default(false),
  use_dora: z.literal(false, { error: "DoRA adapters do not load" }).default(false),
  rank_pattern: z.record(z.string(), z.unknown()).default({}),
  alpha_pattern: z.record(z.string(), z.unknown()).default({}),
});

/**
 * Reads PEFT's files into adapters over `base` (the model's flat params, with its tensor list). The adapters' modules
 * are those the weights file holds (as PEFT applies them); every one must fit the model, and nothing else may be in it.
 */
export function fromPeft(
  configJson: string,
  weights: Uint8Array,
  model: { tensors: { name: string; shape: number[]; offset: number; size: number }[]; base: Float32Array },
): LoraAdapters {
  const parsed = PeftConfigSchema.safeParse(JSON.parse(configJson));
  if (!parsed.success) throw new Error(`${PEFT_CONFIG_FILE}: ${parsed.error.issues.map((i) => `${i.path.join(".") || "config"}: ${i.message}`).join("; ")}`);
  const c = parsed.data;
  if (Object.keys(c.rank_pattern).length > 0 || Object.keys(c.alpha_pattern).length > 0)
    throw new Error(`${PEFT_CONFIG_FILE}: per-module rank_pattern / alpha_pattern do not load`);
  if (c.lora_dropout !== 0) c.lora_dropout = 0; // dropout is a training setting: a loaded adapter serves without it
  const file = readSafetensors(weights);
  const modules = new Set<string>();
  for (const name of file.keys()) {
    const m = /^base_model\.model\.(model\.layers\.\d+\.(?:self_attn|mlp)\.([a-z_]+))\.lora_[AB]\.weight$/.exec(name);
    if (!m || !(LORA_MODULES as readonly string[]).includes(m[2]!)) throw new Error(`${PEFT_WEIGHTS_FILE}: unexpected tensor ${name}`);
    modules.add(m[2]!);
  }
  const settings: LoraSettings = {
    rank: c.r,
    alpha: c.lora_alpha,
    dropout: 0,
    targetModules: [...modules] as LoraSettings["targetModules"],
    rsLora: c.use_rslora,
    seed: 0,
    sft: true,
    ship: "merged",
  };
  const targets = loraTargets(model.tensors, settings);
  const params = adapterValues(targets, c.r, (n) => file.get(n), PEFT_WEIGHTS_FILE);
  return new LoraAdapters(settings, targets, model.base, params);
}
