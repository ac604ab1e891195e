// What rollstream makes of a Hugging Face model folder (`rollstream model info <folder>`): the architecture and
// shape it recognised from config.json, the parameter count, experts, a LoRA adapter, the weights' dtypes and
// whether every tensor it needs is there, the tokenizer and its chat template. Reads only safetensors headers,
// so it is instant on a multi-GB checkpoint. Anything rollstream cannot load is a problem naming the key, the
// tensor or the file.
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { fromHfConfig } from "./hf-config.js";
import { hfTensorShapes, parameterCount } from "./hf-layout.js";
import { HfTokenizer } from "./hf-tokenizer.js";
import { headDimOf, type ModelConfig, moeLayerFlags } from "./model-config.js";
import { hasHfWeights, hfWeightHeaders, WEIGHTS_FILE, WEIGHTS_INDEX_FILE } from "./hf-weights.js";
import type { SafetensorsHeaderEntry } from "./safetensors.js";

export interface ModelFolderInfo {
  /** [label, value] in print order. */
  facts: Array<[string, string]>;
  /** Each a reason the folder does not load as it is; empty = it loads. */
  problems: string[];
}

const IGNORABLE = /(^|\.)rotary_emb\.inv_freq$/;

export function describeModelFolder(dir: string): ModelFolderInfo {
  const out: ModelFolderInfo = { facts: [], problems: [] };
  const configPath = join(dir, "config.json");
  if (!existsSync(configPath)) return { facts: [], problems: [`${configPath}: not found (a Hugging Face model folder has config.json)`] };
  const raw = JSON.parse(readFileSync(configPath, "utf8")) as Record<string, unknown>;
  const arch = Array.isArray(raw["architectures"]) ? ` (${(raw["architectures"] as unknown[]).join(", ")})` : "";
  out.facts.push(["architecture", `${String(raw["model_type"])}${arch}`]);
  let cfg: ModelConfig | undefined;
  try {
    cfg = fromHfConfig(raw);
  } catch (e) {
    out.problems.push(`config.json is not supported: ${(e as Error).message.replace(/^invalid HF config\.json:\n\s*- /, "").replace(/\n\s*- /g, "; ")}`);
  }
  out.facts.push(["experts", expertsOf(raw)]);
  if (cfg) describeShape(cfg, out);
  out.facts.push(["LoRA", loraOf(dir)]);
  describeWeights(dir, raw, cfg, out);
  describeTokenizer(dir, cfg, out);
  return out;
}

function describeShape(c: ModelConfig, out: ModelFolderInfo): void {
  const hd = headDimOf(c);
  out.facts.push([
    "shape",
    `${c.numLayers} layers, hidden ${c.hiddenSize}, ${c.numHeads} heads / ${c.numKvHeads} kv heads of ${hd}, MLP ${c.intermediateSize}, vocab ${c.vocabSize}`,
  ]);
  const extras = [c.qkNorm ? "q/k RMSNorm" : "", c.attentionBias ? "q/k/v bias" : "", c.tieWordEmbeddings ? "tied embeddings" : "untied embeddings"];
  const rope = c.rotaryDim !== undefined ? `partial RoPE (${c.rotaryDim} of ${hd} dims)` : "RoPE";
  out.facts.push(["attention", `${extras.filter(Boolean).join(", ")}; ${rope} theta ${c.ropeTheta}; context ${c.maxPositionEmbeddings}`]);
  out.facts.push(["parameters", human(parameterCount(c)) + activeOf(c)]);
}

/** ", N active per token" for a MoE model: the experts a token does not pick do not count. */
function activeOf(c: ModelConfig): string {
  const flags = moeLayerFlags(c);
  if (!c.moe || !flags) return "";
  const idle = (c.moe.numExperts - c.moe.numExpertsPerTok) * 3 * c.moe.moeIntermediateSize * c.hiddenSize;
  return `, ${human(parameterCount(c) - idle * flags.reduce((n, f) => n + f, 0))} active per token`;
}

function expertsOf(raw: Record<string, unknown>): string {
  const n = raw["num_experts"] ?? raw["n_routed_experts"] ?? raw["num_local_experts"];
  if (n === undefined || n === null || n === 0) return "none (dense)";
  return `${String(n)} routed, top-${String(raw["num_experts_per_tok"] ?? "?")}${raw["n_shared_experts"] ? ` + ${String(raw["n_shared_experts"])} shared` : ""}`;
}

function loraOf(dir: string): string {
  const p = join(dir, "adapter_config.json");
  if (!existsSync(p)) return "none";
  const a = JSON.parse(readFileSync(p, "utf8")) as Record<string, unknown>;
  return `PEFT adapter (r ${String(a["r"])}, alpha ${String(a["lora_alpha"])}, targets ${JSON.stringify(a["target_modules"])}); rollstream does not load adapters yet`;
}

function describeWeights(dir: string, raw: Record<string, unknown>, cfg: ModelConfig | undefined, out: ModelFolderInfo): void {
  if (!hasHfWeights(dir)) {
    out.facts.push(["weights", "none"]);
    out.problems.push(`weights: neither ${join(dir, WEIGHTS_FILE)} nor ${WEIGHTS_INDEX_FILE} found`);
    return;
  }
  let files: string[];
  let tensors: SafetensorsHeaderEntry[];
  try {
    ({ files, tensors } = hfWeightHeaders(dir));
  } catch (e) {
    out.problems.push(`weights: ${(e as Error).message}`);
    return;
  }
  const dtypes = new Map<string, number>();
  for (const t of tensors) dtypes.set(t.dtype, (dtypes.get(t.dtype) ?? 0) + 1);
  const count = tensors.reduce((n, t) => n + t.shape.reduce((a, b) => a * b, 1), 0);
  const declared = raw["torch_dtype"] ?? raw["dtype"];
  out.facts.push([
    "weights",
    `${files.length === 1 ? files[0] : `${files.length} shards (${WEIGHTS_INDEX_FILE})`}: ${tensors.length} tensors, ${human(count)} values, ${[...dtypes].map(([d, n]) => `${d} x${n}`).join(", ")}${declared ? ` (config says ${String(declared)})` : ""}`,
  ]);
  if (cfg) out.problems.push(...tensorProblems(tensors, cfg));
}

function tensorProblems(tensors: SafetensorsHeaderEntry[], cfg: ModelConfig): string[] {
  const want = hfTensorShapes(cfg);
  const have = new Map(tensors.map((t) => [t.name, t.shape]));
  const problems: string[] = [];
  for (const [name, shape] of want) {
    const got = have.get(name);
    if (!got) problems.push(`weights: tensor "${name}" is missing`);
    else if (got.join(",") !== shape.join(",")) problems.push(`weights: tensor "${name}" is [${got.join(", ")}], the config needs [${shape.join(", ")}]`);
  }
  for (const name of have.keys()) {
    if (want.has(name) || IGNORABLE.test(name) || (name === "lm_head.weight" && cfg.tieWordEmbeddings) || ignoredLayer(name, cfg)) continue;
    problems.push(`weights: unexpected tensor "${name}" (not part of this config's model)`);
  }
  return problems.length > 6 ? [...problems.slice(0, 6), `weights: ... and ${problems.length - 6} more tensor problems`] : problems;
}

/** GLM's multi-token-prediction layers past numLayers (ModelConfig.ignoredCheckpointLayers): skipped on load. */
function ignoredLayer(name: string, cfg: ModelConfig): boolean {
  const l = /^model\.layers\.(\d+)\./.exec(name);
  return l !== null && Number(l[1]) >= cfg.numLayers && Number(l[1]) < cfg.numLayers + (cfg.ignoredCheckpointLayers ?? 0);
}

function describeTokenizer(dir: string, cfg: ModelConfig | undefined, out: ModelFolderInfo): void {
  if (!existsSync(join(dir, "tokenizer.json"))) {
    out.facts.push(["tokenizer", "none (tokenizer.json not found; set tokenizer.path)"]);
    return;
  }
  let tok: HfTokenizer;
  try {
    tok = HfTokenizer.fromDir(dir);
  } catch (e) {
    out.problems.push(`tokenizer: ${(e as Error).message}`);
    return;
  }
  const name = (id: number) => (id >= 0 ? `${tok.decode([id])} (${id})` : "none");
  out.facts.push(["tokenizer", `vocab ${tok.vocabSize}, eos ${name(tok.eosId)}, bos ${name(tok.bosId)}, stops [${tok.stopTokenIds().join(", ")}]`]);
  if (cfg && tok.vocabSize > cfg.vocabSize) out.problems.push(`tokenizer: vocabulary ${tok.vocabSize} is larger than the model's vocab_size ${cfg.vocabSize}`);
  let template = "none";
  try {
    tok.applyChatTemplate([{ role: "user", content: "hi" }], { addGenerationPrompt: true });
    const think = readFileSync(join(dir, "tokenizer_config.json"), "utf8").includes("<think>") ? ", <think> reasoning" : "";
    template = `yes; tool calls: ${tok.toolCallFormat ?? "rollstream <tool> protocol (the template has no tool format)"}${think}`;
  } catch (e) {
    if (!/no chat_template/.test((e as Error).message)) out.problems.push(`template: ${(e as Error).message}`);
  }
  out.facts.push(["chat template", template]);
}

function human(n: number): string {
  if (n >= 1e9) return `${(n / 1e9).toFixed(2)}B`;
  if (n >= 1e6) return `${(n / 1e6).toFixed(2)}M`;
  if (n >= 1e3) return `${(n / 1e3).toFixed(1)}K`;
  return String(n);
}

/** The report `rollstream model info` prints. */
export function formatModelInfo(dir: string, info: ModelFolderInfo): string {
  const width = Math.max(0, ...info.facts.map(([k]) => k.length));
  const lines = [`${dir}`, ...info.facts.map(([k, v]) => `  ${k.padEnd(width)}  ${v}`)];
  if (info.problems.length === 0) lines.push("  loads: yes");
  else lines.push(`  loads: no (${info.problems.length} problem${info.problems.length > 1 ? "s" : ""})`, ...info.problems.map((p) => `    - ${p}`));
  return lines.join("\n");
}
