import type { ChatMessage } from "../api/messages.js";
import type { TokenizerLike } from "../api/tokenizer.js";

/**
 * A byte-level tokenizer with a ChatML-style template, for tests and examples: ids 0..255 are UTF-8
 * bytes, then <|im_start|>, <|im_end|> and <|endoftext|> (EOS). Each message renders as
 * `<|im_start|>{role}\n{content}<|im_end|>\n`; the generation prompt is `<|im_start|>assistant\n`.
 */
export class ByteChatTokenizer implements TokenizerLike {
  static readonly IM_START = 256;
  static readonly IM_END = 257;
  static readonly EOS = 258;
  readonly vocabSize = 259;
  readonly eosId = ByteChatTokenizer.EOS;
  private readonly enc = new TextEncoder();
  private readonly dec = new TextDecoder();

  encode(text: string): number[] {
    return Array.from(this.enc.encode(text));
  }

  decode(ids: ArrayLike<number>, opts: { skipSpecial?: boolean } = {}): string {
    let out = "";
    let bytes: number[] = [];
    const flush = () => {
      out += this.dec.decode(new Uint8Array(bytes));
      bytes = [];
    };
    for (let i = 0; i < ids.length; i++) {
      const id = ids[i]!;
      if (id < 256) bytes.push(id);
      else {
        flush();
        if (!opts.skipSpecial) out += SPECIAL[id] ?? `<|unk${id}|>`;
      }
    }
    flush();
    return out;
  }

  applyChatTemplate(messages: ChatMessage[], opts: { addGenerationPrompt?: boolean } = {}): number[] {
    const ids: number[] = [];
    for (const m of messages) {
      ids.push(ByteChatTokenizer.IM_START, ...this.encode(`${m.role}\n${m.content}`), ByteChatTokenizer.IM_END, ...this.encode("\n"));
    }
    if (opts.addGenerationPrompt) ids.push(ByteChatTokenizer.IM_START, ...this.encode("assistant\n"));
    return ids;
  }

  stopTokenIds(): number[] {
    return [ByteChatTokenizer.IM_END, ByteChatTokenizer.EOS];
  }
}

const SPECIAL: Record<number, string> = { 256: "<|im_start|>", 257: "<|im_end|>", 258: "<|endoftext|>" };
