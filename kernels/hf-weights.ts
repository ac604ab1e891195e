// The weights of a Hugging Face model folder: one `model.safetensors`, or shards named by
// `model.safetensors.index.json` ({"metadata": {"total_size": …}, "weight_map": {tensor: shard file}}), as
// transformers' save_pretrained writes any model past its shard size (every Qwen3 from 4B up on the Hub).
// An index is read strictly: a shard it names must be a file in the folder, each tensor must be in the shard
// the index says, and a shard's tensor the index does not list is an error, so a half-copied folder cannot
// load as a model with some weights left at their initial values.
import { closeSync, existsSync, openSync, readFileSync, readSync, statSync } from "node:fs";
import { basename, join } from "node:path";
import { readSafetensors, readSafetensorsHeader, type LoadedTensor, type SafetensorsHeaderEntry } from "./safetensors.js";

export const WEIGHTS_FILE = "model.safetensors";
export const WEIGHTS_INDEX_FILE = "model.safetensors.index.json";

/** Whether `dir` holds HF weights: one file, or a shard index. */
export function hasHfWeights(dir: string): boolean {
  return existsSync(join(dir, WEIGHTS_FILE)) || existsSync(join(dir, WEIGHTS_INDEX_FILE));
}

/** The shard files of an index, each with the tensors the index puts there; an error names what is wrong. */
export function readWeightIndex(dir: string): Map<string, string[]> {
  const path = join(dir, WEIGHTS_INDEX_FILE);
  let raw: unknown;
  try {
    raw = JSON.parse(readFileSync(path, "utf8"));
  } catch (e) {
    throw new Error(`${path}: ${(e as Error).message}`);
  }
  const map = (raw as { weight_map?: unknown })?.weight_map;
  if (map === null || typeof map !== "object" || Array.isArray(map)) throw new Error(`${path}: no "weight_map" object`);
  const shards = new Map<string, string[]>();
  for (const [tensor, file] of Object.entries(map as Record<string, unknown>)) {
    // A file name in the folder itself: an index must not reach outside it.
    if (typeof file !== "string" || file !== basename(file) || file.startsWith("."))
      throw new Error(`${path}: tensor "${tensor}" names shard ${JSON.stringify(file)}, not a file name in the folder`);
    if (!existsSync(join(dir, file))) throw new Error(`${path}: shard ${file} (holding "${tensor}") is not in ${dir}`);
    shards.set(file, [...(shards.get(file) ?? []), tensor]);
  }
  if (shards.size === 0) throw new Error(`${path}: "weight_map" names no tensor`);
  return shards;
}

/** Checks a shard's own tensor names against what the index puts in it. */
function checkShard(dir: string, file: string, listed: readonly string[], names: readonly string[]): void {
  const have = new Set(names);
  const missing = listed.find((t) => !have.has(t));
  if (missing) throw new Error(`${join(dir, file)}: tensor "${missing}" is not in this shard, though ${WEIGHTS_INDEX_FILE} says it is`);
  const want = new Set(listed);
  const extra = names.find((t) => !want.has(t));
  if (extra) throw new Error(`${join(dir, file)}: tensor "${extra}" is not in ${WEIGHTS_INDEX_FILE}`);
}

/** Every tensor of the folder's weights (values as f32), from one file or from every shard of its index. */
export function readHfWeights(dir: string): Map<string, LoadedTensor> {
  if (existsSync(join(dir, WEIGHTS_FILE))) return readSafetensors(new Uint8Array(readFileSync(join(dir, WEIGHTS_FILE))));
  if (!existsSync(join(dir, WEIGHTS_INDEX_FILE))) throw new Error(`${dir}: no ${WEIGHTS_FILE} and no ${WEIGHTS_INDEX_FILE}`);
  const out = new Map<string, LoadedTensor>();
  for (const [file, listed] of readWeightIndex(dir)) {
    const tensors = readSafetensors(new Uint8Array(readFileSync(join(dir, file))));
    checkShard(dir, file, listed, [...tensors.keys()]);
    for (const [name, t] of tensors) out.set(name, t);
  }
  return out;
}

/** The header entries of one safetensors file, read without its data. */
function headerOf(path: string): SafetensorsHeaderEntry[] {
  const fd = openSync(path, "r");
  try {
    const size = statSync(path).size;
    const len = Buffer.alloc(8);
    readSync(fd, len, 0, 8, 0);
    const n = Number(len.readBigUInt64LE(0));
    const head = Buffer.alloc(8 + Math.max(0, Math.min(n, size - 8)));
    readSync(fd, head, 0, head.length, 0);
    return readSafetensorsHeader(new Uint8Array(head.buffer, head.byteOffset, head.length), size).tensors;
  } finally {
    closeSync(fd);
  }
}

/** The header entries of the folder's weights (no tensor data read): one file, or every shard, checked as above. */
export function hfWeightHeaders(dir: string): { files: string[]; tensors: SafetensorsHeaderEntry[] } {
  if (existsSync(join(dir, WEIGHTS_FILE))) return { files: [WEIGHTS_FILE], tensors: headerOf(join(dir, WEIGHTS_FILE)) };
  const tensors: SafetensorsHeaderEntry[] = [];
  const shards = readWeightIndex(dir);
  for (const [file, listed] of shards) {
    const entries = headerOf(join(dir, file));
    checkShard(
      dir,
      file,
      listed,
      entries.map((e) => e.name),
    );
    tensors.push(...entries);
  }
  return { files: [...shards.keys()], tensors };
}
