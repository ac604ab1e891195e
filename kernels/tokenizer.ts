// Tokenizers behind one interface, so the byte-level tokenizer used for models trained from scratch and a
// Hugging Face tokenizer folder (hf-tokenizer.ts) are interchangeable for the inference and learner actors.
import { HfTokenizer } from "./hf-tokenizer.js";

export type ChatRole = "system" | "user" | "assistant" | "tool";

export interface ChatMessage {
  role: ChatRole;
  content: string;
}

export interface Tokenizer {
  readonly vocabSize: number;
  readonly bosId: number;
  readonly eosId: number;
  readonly padId: number;
  /** Plain text to ids. Special-token strings inside text are NOT turned into special ids. */
  encode(text: string): number[];
  /** Ids to text; never throws on ids that form invalid UTF-8 (they decode to U+FFFD). */
  decode(ids: ArrayLike<number>, opts?: { skipSpecial?: boolean }): string;
  /** tools: function definitions (OpenAI's `tools`) the template shows the model, as transformers passes them. */
  applyChatTemplate(messages: ChatMessage[], opts?: { addGenerationPrompt?: boolean; tools?: readonly object[] }): number[];
  /** Id of a special token, by "<|name|>" or "name". Throws on an unknown name. */
  specialTokenId(name: string): number;
  /** Ids that end a generated turn. */
  stopTokenIds(): number[];
}

const ROLES: readonly ChatRole[] = ["system", "user", "assistant", "tool"];
const NAMED_SPECIALS = ["pad", "bos", "eos", "system", "user", "assistant", "tool", "end"] as const;
const BYTE_COUNT = 256;
// Vocab rounded up to a multiple of 32 so the embedding and lm_head matmuls stay aligned; the leftover
// slots become reserved tokens a later format can claim without resizing the model.
const VOCAB_ALIGN = 32;

/**
 * Byte-level tokenizer: ids 0..255 are UTF-8 bytes, then <|pad|>, <|bos|>, <|eos|>, <|system|>, <|user|>,
 * <|assistant|>, <|tool|>, <|end|>, then <|reserved_k|> up to a multiple of 32 (288 in all).
 * Chat template: <|bos|> then per message <|role|> content <|end|>; a generation prompt appends <|assistant|>.
 * The model ends its turn with <|end|>.
 */
export class ByteTokenizer implements Tokenizer {
  readonly vocabSize: number;
  readonly bosId: number;
  readonly eosId: number;
  readonly padId: number;
  readonly endId: number;
  /** Special token strings ("<|end|>"), indexed by id - 256. */
  private readonly specials: string[];
  private readonly idByName = new Map<string, number>();
  private readonly encoder = new TextEncoder();
  // fatal: false is the point: sampled junk bytes must decode to U+FFFD, not throw.
  private readonly decoder = new TextDecoder("utf-8", { fatal: false });

  constructor() {
    const named = NAMED_SPECIALS.map((n) => `<|${n}|>`);
    this.vocabSize = Math.ceil((BYTE_COUNT + named.length) / VOCAB_ALIGN) * VOCAB_ALIGN;
    const reserved = Array.from({ length: this.vocabSize - BYTE_COUNT - named.length }, (_, k) => `<|reserved_${k}|>`);
    this.specials = [...named, ...reserved];
    this.specials.forEach((s, i) => {
      this.idByName.set(s, BYTE_COUNT + i);
      this.idByName.set(s.slice(2, -2), BYTE_COUNT + i);
    });
    this.padId = this.specialTokenId("pad");
    this.bosId = this.specialTokenId("bos");
    this.eosId = this.specialTokenId("eos");
    this.endId = this.specialTokenId("end");
  }

  encode(text: string): number[] {
    return Array.from(this.encoder.encode(text));
  }

  decode(ids: ArrayLike<number>, opts: { skipSpecial?: boolean } = {}): string {
    // Bytes are buffered so a multi-byte character split across ids still decodes as one character.
    let out = "";
    const bytes: number[] = [];
    const flush = () => {
      if (bytes.length) out += this.decoder.decode(Uint8Array.from(bytes));
      bytes.length = 0;
    };
    for (let i = 0; i < ids.length; i++) {
      const id = ids[i];
      if (!Number.isInteger(id) || id < 0 || id >= this.vocabSize) {
        throw new Error(`token id ${id} at index ${i} is outside the byte tokenizer's vocab [0, ${this.vocabSize})`);
      }
      if (id < BYTE_COUNT) {
        bytes.push(id);
        continue;
      }
      flush();
      if (!opts.skipSpecial) out += this.specials[id - BYTE_COUNT];
    }
    flush();
    return out;
  }

  /** Tools, when given, come first as one system turn holding their JSON definitions (this format has no tool syntax of its own). */
  applyChatTemplate(messages: ChatMessage[], opts: { addGenerationPrompt?: boolean; tools?: readonly object[] } = {}): number[] {
    const ids = [this.bosId];
    if (opts.tools?.length) ids.push(this.specialTokenId("system"), ...this.encode(`Tools: ${JSON.stringify(opts.tools)}`), this.endId);
    messages.forEach((m, i) => {
      if (!ROLES.includes(m.role)) throw new Error(`message ${i}: unknown role "${String(m.role)}" (expected ${ROLES.join(", ")})`);
      if (typeof m.content !== "string") throw new Error(`message ${i}: content must be a string`);
      ids.push(this.specialTokenId(m.role), ...this.encode(m.content), this.endId);
    });
    if (opts.addGenerationPrompt) ids.push(this.specialTokenId("assistant"));
    return ids;
  }

  specialTokenId(name: string): number {
    const id = this.idByName.get(name);
    if (id === undefined) throw new Error(`unknown special token "${name}" (known: ${NAMED_SPECIALS.map((n) => `<|${n}|>`).join(", ")}, <|reserved_k|>)`);
    return id;
  }

  stopTokenIds(): number[] {
    return [this.endId, this.eosId];
  }
}

export type TokenizerSpec = { kind: "byte" } | { kind: "hf"; path: string };

export function loadTokenizer(spec: TokenizerSpec): Tokenizer {
  switch (spec?.kind) {
    case "byte":
      return new ByteTokenizer();
    case "hf":
      return HfTokenizer.fromDir(spec.path);
    default:
      throw new Error(`unknown tokenizer kind ${JSON.stringify((spec as { kind?: unknown } | undefined)?.kind)} (expected "byte" or "hf")`);
  }
}
