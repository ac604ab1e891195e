// A Hugging Face tokenizer folder made on the spot, for tests: byte-level BPE with a few merges, the
// special tokens of a Qwen-style chat format, its chat template and a generation_config with EOS ids.
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

/** GPT-2's byte <-> printable-character table, which byte-level BPE vocabularies are written in. */
function byteToUnicode(): string[] {
  const keep: number[] = [];
  for (let b = 33; b <= 126; b++) keep.push(b);
  for (let b = 161; b <= 172; b++) keep.push(b);
  for (let b = 174; b <= 255; b++) keep.push(b);
  const out: string[] = new Array(256);
  let extra = 0;
  for (let b = 0; b < 256; b++) out[b] = keep.includes(b) ? String.fromCharCode(b) : String.fromCharCode(256 + extra++);
  return out;
}

const QWEN_TEMPLATE =
  "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}" +
  "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

export function writeTokenizerDir(opts: { template?: boolean; generation?: boolean } = {}): { dir: string; ids: Record<string, number> } {
  const dir = mkdtempSync(join(tmpdir(), "rs-hf-tok-"));
  const bytes = byteToUnicode();
  const vocab: Record<string, number> = {};
  bytes.forEach((ch, i) => (vocab[ch] = i));
  const merges = [
    ["h", "e"],
    ["l", "l"],
    ["he", "ll"],
    ["hell", "o"],
    ["Ġ", "w"],
    ["o", "r"],
    ["Ġw", "or"],
    ["Ġwor", "l"],
    ["Ġworl", "d"],
  ];
  for (const [a, b] of merges) vocab[a! + b!] = Object.keys(vocab).length;
  const specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"];
  const base = Object.keys(vocab).length;
  const ids: Record<string, number> = {};
  specials.forEach((s, k) => (ids[s] = base + k));
  ids.hello = vocab.hello!;
  ids["Ġworld"] = vocab["Ġworld"]!;
  const tokenizerJson = {
    version: "1.0",
    truncation: null,
    padding: null,
    added_tokens: specials.map((content, k) => ({ id: base + k, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true })),
    normalizer: null,
    pre_tokenizer: { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: true },
    post_processor: { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: true },
    decoder: { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: true },
    model: {
      type: "BPE",
      dropout: null,
      unk_token: null,
      continuing_subword_prefix: null,
      end_of_word_suffix: null,
      fuse_unk: false,
      byte_fallback: false,
      vocab,
      merges: merges.map(([a, b]) => `${a} ${b}`),
    },
  };
  writeFileSync(join(dir, "tokenizer.json"), JSON.stringify(tokenizerJson));
  const config: Record<string, unknown> = { bos_token: null, eos_token: "<|im_end|>", pad_token: "<|endoftext|>", model_max_length: 32768 };
  if (opts.template !== false) config.chat_template = QWEN_TEMPLATE;
  writeFileSync(join(dir, "tokenizer_config.json"), JSON.stringify(config));
  if (opts.generation !== false)
    writeFileSync(join(dir, "generation_config.json"), JSON.stringify({ eos_token_id: [ids["<|im_end|>"], ids["<|endoftext|>"]] }));
  return { dir, ids };
}
