// Each policy version as a Hugging Face folder that SGLang, vLLM and `rollstream serve` load as they load any
// checkpoint: <exportDir>/v<n>/ with config.json, model.safetensors (the learner's bytes from the object store,
// HF tensor names) and the run's tokenizer files when it has an HF tokenizer. A folder appears whole or not at
// all (written beside it, then renamed), so a server never reads half a version, and two inference replicas
// exporting the same version at once leave one complete copy.
import { copyFileSync, existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { toHfConfig } from "../../../kernels/hf-config.js";
import type { RunConfig } from "../../runtime/config.js";
import { modelConfigOf } from "../../runtime/model-factory.js";

/** Tokenizer files a server reads next to the weights (those the tokenizer folder has). */
const TOKENIZER_FILES = ["tokenizer.json", "tokenizer_config.json", "generation_config.json", "special_tokens_map.json"];

export class HfExporter {
  constructor(
    readonly dir: string,
    private readonly configJson: string,
    private readonly tokenizerDir: string | undefined,
    private readonly keep: number,
  ) {}

  static forRun(config: RunConfig, runDir: string): HfExporter {
    const dir = config.weights.exportDir ?? join(runDir, "hf-weights");
    const m = config.model;
    // A checkpoint's own config.json keeps what ours does not model (torch_dtype, token ids, rope details).
    const configJson =
      m.path && existsSync(join(m.path, "config.json"))
        ? readFileSync(join(m.path, "config.json"), "utf8")
        : `${JSON.stringify({ ...toHfConfig(modelConfigOf(config)), torch_dtype: "float32" }, null, 2)}\n`;
    const tokenizerDir = config.tokenizer.kind === "hf" ? (config.tokenizer.path ?? m.path) : undefined;
    return new HfExporter(dir, configJson, tokenizerDir, config.weights.keepVersions);
  }

  folderOf(version: number): string {
    return join(this.dir, `v${version}`);
  }

  /** The folder of `version`, written unless a complete one is there already. */
  write(version: number, safetensors: Uint8Array): string {
    const final = this.folderOf(version);
    if (existsSync(join(final, "model.safetensors"))) return final;
    mkdirSync(this.dir, { recursive: true });
    const tmp = join(this.dir, `.v${version}.${process.pid}.${Date.now()}`);
    mkdirSync(tmp);
    try {
      writeFileSync(join(tmp, "config.json"), this.configJson);
      writeFileSync(join(tmp, "model.safetensors"), safetensors);
      for (const f of TOKENIZER_FILES) {
        if (this.tokenizerDir && existsSync(join(this.tokenizerDir, f))) copyFileSync(join(this.tokenizerDir, f), join(tmp, f));
      }
      renameSync(tmp, final);
    } catch (e) {
      rmSync(tmp, { recursive: true, force: true });
      // Another replica renamed its complete copy first: use that one.
      if (!existsSync(join(final, "model.safetensors"))) throw e;
    }
    return final;
  }

  /** Removes all but the newest `keep` versions, never `current` (a server that rejoins loads it). */
  prune(current: number): void {
    if (!existsSync(this.dir)) return;
    const versions = readdirSync(this.dir)
      .map((n) => /^v(\d+)$/.exec(n))
      .filter((m): m is RegExpExecArray => m !== null)
      .map((m) => Number(m[1]))
      .sort((a, b) => b - a);
    for (const v of versions.slice(this.keep)) if (v !== current) rmSync(this.folderOf(v), { recursive: true, force: true });
  }
}
