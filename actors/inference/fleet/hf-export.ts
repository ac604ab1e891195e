// Each policy version as a Hugging Face folder that SGLang, vLLM and `rollstream serve` load as they load any
// checkpoint: <exportDir>/v<n>/ with config.json, model.safetensors (the learner's bytes from the object store,
// HF tensor names) and the run's tokenizer files when it has an HF tokenizer. A folder appears whole or not at
// all (written beside it, then renamed), so a server never reads half a version, and two inference replicas
// exporting the same version at once leave one complete copy.
// With LoRA adapter shipping (model.lora.ship adapter): the frozen base once, <exportDir>/lora-base-<sha12>/ (an HF
// folder like the others), and each version's adapters as <exportDir>/<run>-v<n>/ (adapter_config.json,
// adapter_model.safetensors: PEFT's folder, what vLLM's and SGLang's load_lora_adapter read).
import { copyFileSync, existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { basename, join } from "node:path";
import { PEFT_CONFIG_FILE, PEFT_WEIGHTS_FILE } from "../../../kernels/lora-peft.js";
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
    return this.writeModel(this.folderOf(version), safetensors);
  }

  /** The LoRA base's HF folder (named by its sha256), written unless it is there already. */
  writeBase(sha256: string, safetensors: Uint8Array): string {
    return this.writeModel(join(this.dir, `lora-base-${sha256.slice(0, 12)}`), safetensors);
  }

  /** A version's PEFT adapter folder <exportDir>/<name>, written unless it is there already. */
  writeAdapter(name: string, files: { config: string; weights: Uint8Array }): string {
    return this.writeFolder(join(this.dir, name), PEFT_WEIGHTS_FILE, (tmp) => {
      writeFileSync(join(tmp, PEFT_CONFIG_FILE), files.config);
      writeFileSync(join(tmp, PEFT_WEIGHTS_FILE), files.weights);
    });
  }

  private writeModel(final: string, safetensors: Uint8Array): string {
    return this.writeFolder(final, "model.safetensors", (tmp) => {
      writeFileSync(join(tmp, "config.json"), this.configJson);
      writeFileSync(join(tmp, "model.safetensors"), safetensors);
      for (const f of TOKENIZER_FILES) {
        if (this.tokenizerDir && existsSync(join(this.tokenizerDir, f))) copyFileSync(join(this.tokenizerDir, f), join(tmp, f));
      }
    });
  }

  /** `final` written whole by `fill` into a folder beside it, then renamed; `marker` is the file a complete one has. */
  private writeFolder(final: string, marker: string, fill: (tmp: string) => void): string {
    if (existsSync(join(final, marker))) return final;
    mkdirSync(this.dir, { recursive: true });
    const tmp = join(this.dir, `.${basename(final)}.${process.pid}.${Date.now()}`);
    mkdirSync(tmp);
    try {
      fill(tmp);
      renameSync(tmp, final);
    } catch (e) {
      rmSync(tmp, { recursive: true, force: true });
      // Another replica renamed its complete copy first: use that one.
      if (!existsSync(join(final, marker))) throw e;
    }
    return final;
  }

  /**
   * Removes all but the newest `keep` versions' folders (full weights, and adapters named `adapterPrefix`<n>), never
   * `current`'s (a server that rejoins loads it).
   */
  prune(current: number, adapterPrefix?: string): void {
    if (!existsSync(this.dir)) return;
    const prefixes = adapterPrefix === undefined ? ["v"] : ["v", adapterPrefix];
    for (const prefix of prefixes) {
      const versions = readdirSync(this.dir)
        .filter((n) => n.startsWith(prefix) && /^\d+$/.test(n.slice(prefix.length)))
        .map((n) => Number(n.slice(prefix.length)))
        .sort((a, b) => b - a);
      for (const v of versions.slice(this.keep)) if (v !== current) rmSync(join(this.dir, `${prefix}${v}`), { recursive: true, force: true });
    }
  }
}
