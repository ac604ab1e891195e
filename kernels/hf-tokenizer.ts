// A Hugging Face tokenizer folder (tokenizer.json, tokenizer_config.json, generation_config.json) behind
// our Tokenizer interface, so `model.path` checkpoints are trained with the tokenizer they were made with.
// Tokenization is @huggingface/tokenizers (the Hub's own JS port: BPE, WordPiece, Unigram, byte-level and
// Metaspace pre-tokenizers); chat templates are rendered with @huggingface/jinja, as transformers does.
import { existsSync, readFileSync } from "node:fs";
import { basename, dirname, join } from "node:path";
import { Tokenizer as HubTokenizer } from "@huggingface/tokenizers";
import { Template } from "@huggingface/jinja";
import type { ChatMessage, Tokenizer } from "./tokenizer.js";

type TokenField = string | { content?: unknown } | null | undefined;

interface TokenizerConfigJson {
  bos_token?: TokenField;
  eos_token?: TokenField;
  pad_token?: TokenField;
  chat_template?: string | Array<{ name: string; template: string }> | null;
  [k: string]: unknown;
}

function readJson(path: string, what: string, required: boolean): Record<string, unknown> | undefined {
  if (!existsSync(path)) {
    if (required) throw new Error(`HF tokenizer: ${what} not found at ${path}`);
    return undefined;
  }
  let value: unknown;
  try {
    value = JSON.parse(readFileSync(path, "utf8"));
  } catch (e) {
    throw new Error(`HF tokenizer: ${path} is not valid JSON (${(e as Error).message})`);
  }
  if (value === null || typeof value !== "object" || Array.isArray(value)) throw new Error(`HF tokenizer: ${path} is not a JSON object`);
  return value as Record<string, unknown>;
}

function tokenContent(field: TokenField): string | undefined {
  if (typeof field === "string") return field;
  if (field && typeof field === "object" && typeof field.content === "string") return field.content;
  return undefined;
}

function chatTemplateOf(cfg: TokenizerConfigJson, dir: string): string | undefined {
  const t = cfg.chat_template;
  if (typeof t === "string") return t;
  if (Array.isArray(t)) return t.find((x) => x?.name === "default")?.template ?? t[0]?.template;
  // Newer checkpoints keep it next to the config instead.
  const jinja = join(dir, "chat_template.jinja");
  return existsSync(jinja) ? readFileSync(jinja, "utf8") : undefined;
}

export class HfTokenizer implements Tokenizer {
  readonly vocabSize: number;
  /** -1 when the tokenizer has no BOS token (Qwen, for one). */
  readonly bosId: number;
  readonly eosId: number;
  /** The pad token, else EOS. */
  readonly padId: number;
  private readonly hub: HubTokenizer;
  private readonly template: Template | undefined;
  private readonly stops: number[];
  private readonly tokens: { bos?: string; eos: string; pad?: string };
  /** Contents of added/special tokens of 2+ characters, longest first (so "<|a|>x" wins over "<|a|>"). */
  private readonly addedContents: string[];
  private readonly addedAll: Set<string>;

  /**
   * `path`: a folder holding tokenizer.json (required), tokenizer_config.json and generation_config.json
   * (optional), or the tokenizer.json file itself (its folder is then searched for the others).
   */
  static fromDir(path: string): HfTokenizer {
    const dir = basename(path) === "tokenizer.json" ? dirname(path) : path;
    const tokenizerJson = readJson(join(dir, "tokenizer.json"), "tokenizer.json", true)!;
    const config = (readJson(join(dir, "tokenizer_config.json"), "tokenizer_config.json", false) ?? {}) as TokenizerConfigJson;
    const generation = readJson(join(dir, "generation_config.json"), "generation_config.json", false);
    return new HfTokenizer(tokenizerJson, config, generation, dir);
  }

  constructor(tokenizerJson: Record<string, unknown>, config: TokenizerConfigJson, generation: Record<string, unknown> | undefined, dir = ".") {
    try {
      this.hub = new HubTokenizer(tokenizerJson, config);
    } catch (e) {
      throw new Error(`HF tokenizer in ${dir}: cannot build it from tokenizer.json (${(e as Error).message})`);
    }
    const vocab = this.hub.get_vocab(true);
    let maxId = -1;
    for (const id of vocab.values()) maxId = Math.max(maxId, id);
    if (maxId < 0) throw new Error(`HF tokenizer in ${dir}: tokenizer.json has an empty vocabulary`);
    this.vocabSize = maxId + 1;

    const idOf = (content: string | undefined, field: string): number | undefined => {
      if (content === undefined) return undefined;
      const id = this.hub.token_to_id(content);
      if (id === undefined) throw new Error(`HF tokenizer in ${dir}: ${field} ${JSON.stringify(content)} is not in the vocabulary`);
      return id;
    };
    const genEos = generation?.eos_token_id;
    const genEosIds = (Array.isArray(genEos) ? genEos : genEos === undefined ? [] : [genEos]).filter((x): x is number => Number.isInteger(x));
    const eosContent = tokenContent(config.eos_token) ?? (genEosIds.length ? this.hub.id_to_token(genEosIds[0]!) : undefined);
    if (eosContent === undefined)
      throw new Error(`HF tokenizer in ${dir}: no eos_token in tokenizer_config.json and no eos_token_id in generation_config.json`);
    this.eosId = idOf(eosContent, "eos_token")!;
    const bosContent = tokenContent(config.bos_token);
    this.bosId = idOf(bosContent, "bos_token") ?? -1;
    const padContent = tokenContent(config.pad_token);
    this.padId = idOf(padContent, "pad_token") ?? this.eosId;
    this.tokens = { bos: bosContent, eos: eosContent, pad: padContent };
    // The turn ends at the config's EOS (what chat templates close a turn with); generation_config may add more.
    this.stops = [...new Set([this.eosId, ...genEosIds.filter((id) => id >= 0 && id < this.vocabSize)])];
    this.addedAll = new Set([...this.hub.get_added_tokens_decoder().values()].map((t) => t.content));
    this.addedContents = [...this.addedAll].filter((c) => [...c].length > 1).sort((a, b) => b.length - a.length);

    const source = chatTemplateOf(config, dir);
    if (source !== undefined) {
      try {
        this.template = new Template(source);
      } catch (e) {
        throw new Error(`HF tokenizer in ${dir}: the chat template does not parse (${(e as Error).message})`);
      }
    }
  }

  /**
   * Plain text to ids, without BOS/EOS. Special-token strings in the text stay text: each occurrence is
   * cut after its first character, so a user or a tool output cannot forge `<|im_end|>` and end a turn.
   */
  encode(text: string): number[] {
    const out: number[] = [];
    let rest = text;
    for (;;) {
      const at = this.firstAddedToken(rest);
      if (at === null) {
        if (rest.length > 0) out.push(...this.encodePlain(rest));
        return out;
      }
      // Cut after the special string's first code point: no special string is whole on either side.
      const cut = at.index + String.fromCodePoint(at.content.codePointAt(0)!).length;
      out.push(...this.encodePlain(rest.slice(0, cut)));
      rest = rest.slice(cut);
    }
  }

  private encodePlain(text: string): number[] {
    return this.hub.encode(text, { add_special_tokens: false }).ids;
  }

  private firstAddedToken(text: string): { index: number; content: string } | null {
    let best: { index: number; content: string } | null = null;
    for (const content of this.addedContents) {
      const index = text.indexOf(content);
      if (index >= 0 && (best === null || index < best.index)) best = { index, content };
    }
    return best;
  }

  decode(ids: ArrayLike<number>, opts: { skipSpecial?: boolean } = {}): string {
    const list: number[] = [];
    for (let i = 0; i < ids.length; i++) {
      const id = ids[i]!;
      if (!Number.isInteger(id) || id < 0 || id >= this.vocabSize)
        throw new Error(`token id ${id} at index ${i} is outside the tokenizer's vocab [0, ${this.vocabSize})`);
      list.push(id);
    }
    if (list.length === 0) return ""; // the library refuses an empty list
    return this.hub.decode(list, { skip_special_tokens: opts.skipSpecial === true, clean_up_tokenization_spaces: false });
  }

  /** The chat template rendered (as transformers' apply_chat_template does) and tokenized, specials included. */
  applyChatTemplate(messages: ChatMessage[], opts: { addGenerationPrompt?: boolean; tools?: readonly object[] } = {}): number[] {
    if (!this.template) throw new Error("HF tokenizer: tokenizer_config.json has no chat_template (and there is no chat_template.jinja)");
    messages.forEach((m, i) => {
      if (typeof m?.content !== "string") throw new Error(`message ${i}: content must be a string`);
    });
    const text = this.template.render({
      messages,
      add_generation_prompt: opts.addGenerationPrompt === true,
      // As transformers: templates that know tools render them (Qwen's lists them in the system turn); others ignore them.
      ...(opts.tools?.length ? { tools: opts.tools } : {}),
      bos_token: this.tokens.bos ?? "",
      eos_token: this.tokens.eos,
      pad_token: this.tokens.pad ?? "",
    });
    // The template writes special tokens as text on purpose: here they must become their ids.
    return this.hub.encode(text, { add_special_tokens: false }).ids;
  }

  specialTokenId(name: string): number {
    const alias: Record<string, number> = { eos: this.eosId, pad: this.padId, end: this.stops[0]! };
    if (this.bosId >= 0) alias.bos = this.bosId;
    if (name in alias) return alias[name]!;
    for (const candidate of [name, `<|${name}|>`, `<${name}>`]) {
      if (this.addedAll.has(candidate)) return this.hub.token_to_id(candidate)!;
    }
    throw new Error(
      `unknown special token "${name}" (this tokenizer has ${[...this.addedAll].slice(0, 12).join(", ")}${this.addedAll.size > 12 ? ", ..." : ""}; aliases eos, pad, end${this.bosId >= 0 ? ", bos" : ""})`,
    );
  }

  stopTokenIds(): number[] {
    return [...this.stops];
  }
}
