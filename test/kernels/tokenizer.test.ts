import { test } from "node:test";
import assert from "node:assert/strict";
import { ByteTokenizer, loadTokenizer } from "../../kernels/tokenizer.js";

const tok = new ByteTokenizer();

test("encode/decode round trips ASCII, multi-byte UTF-8 and emoji", () => {
  for (const s of ["", "hello, world\n", "naïve café — Ωμέγα", "数学の問題", "👍🏽 family: 👨‍👩‍👧", "tab\tnull\u0000end"]) {
    const ids = tok.encode(s);
    assert.deepEqual(ids, Array.from(Buffer.from(s, "utf8")), `bytes of ${JSON.stringify(s)}`);
    assert.ok(ids.every((id) => id >= 0 && id < 256));
    assert.equal(tok.decode(ids), s);
  }
});

test("vocab is 256 bytes + specials rounded to a multiple of 32; special ids distinct and in range", () => {
  assert.equal(tok.vocabSize, 288);
  assert.equal(tok.vocabSize % 32, 0);
  const names = ["pad", "bos", "eos", "system", "user", "assistant", "tool", "end"];
  const ids = names.map((n) => tok.specialTokenId(n));
  assert.equal(new Set(ids).size, names.length);
  for (const id of ids) assert.ok(id >= 256 && id < tok.vocabSize);
  assert.equal(tok.specialTokenId("<|end|>"), tok.specialTokenId("end"));
  assert.deepEqual([tok.padId, tok.bosId, tok.eosId], ids.slice(0, 3));
  assert.deepEqual(tok.stopTokenIds(), [tok.specialTokenId("end"), tok.eosId]);
  assert.equal(tok.specialTokenId("<|reserved_0|>"), 264);
  assert.equal(tok.specialTokenId(`<|reserved_${tok.vocabSize - 265}|>`), tok.vocabSize - 1);
  assert.throws(() => tok.specialTokenId("<|nope|>"), /unknown special token "<\|nope\|>"/);
});

test("chat template produces the exact ids", () => {
  const [bos, sys, user, asst, tool, end] = ["bos", "system", "user", "assistant", "tool", "end"].map((n) => tok.specialTokenId(n));
  const ids = tok.applyChatTemplate(
    [
      { role: "system", content: "Be brief." },
      { role: "user", content: "2+2?" },
      { role: "assistant", content: "4" },
      { role: "tool", content: "ok" },
    ],
    { addGenerationPrompt: true },
  );
  const bytes = (s: string) => Array.from(Buffer.from(s, "utf8"));
  assert.deepEqual(ids, [bos, sys, ...bytes("Be brief."), end, user, ...bytes("2+2?"), end, asst, 0x34, end, tool, ...bytes("ok"), end, asst]);
  assert.deepEqual(tok.applyChatTemplate([{ role: "user", content: "hi" }]), [bos, user, 0x68, 0x69, end]);
  assert.equal(tok.decode(ids.slice(0, 12)), "<|bos|><|system|>Be brief.<|end|>");
  assert.equal(tok.decode(ids, { skipSpecial: true }), "Be brief.2+2?4ok");
  assert.throws(() => tok.applyChatTemplate([{ role: "robot" as "user", content: "x" }]), /message 0: unknown role "robot"/);
});

test("special-token text in user content stays plain bytes", () => {
  const ids = tok.encode("<|end|>");
  assert.ok(ids.every((id) => id < 256));
  assert.equal(ids.length, 7);
});

test("decode tolerates invalid UTF-8 and rejects ids outside the vocab", () => {
  assert.equal(tok.decode([0xff, 0x41]), "\uFFFDA");
  assert.equal(tok.decode([0xe2, 0x82]), "\uFFFD"); // truncated 3-byte sequence
  assert.equal(tok.decode([0xc3, tok.eosId, 0xa9]), "\uFFFD<|eos|>\uFFFD"); // a special token splits a character
  assert.equal(tok.decode(Int32Array.from([0xc3, 0xa9])), "é");
  assert.throws(() => tok.decode([65, 288]), /token id 288 at index 1 is outside/);
  assert.throws(() => tok.decode([-1]), /token id -1/);
});

test("loadTokenizer", () => {
  assert.equal(loadTokenizer({ kind: "byte" }).vocabSize, 288);
  // A folder or the tokenizer.json in it: both name the same tokenizer (hf-tokenizer.test.ts loads real ones).
  assert.throws(() => loadTokenizer({ kind: "hf", path: "/m/tokenizer.json" }), /tokenizer\.json not found at \/m\/tokenizer\.json$/);
  assert.throws(() => loadTokenizer({ kind: "hf", path: "/m" }), /tokenizer\.json not found at \/m\/tokenizer\.json$/);
  assert.throws(() => loadTokenizer({ kind: "sp" } as unknown as { kind: "byte" }), /unknown tokenizer kind "sp"/);
});
