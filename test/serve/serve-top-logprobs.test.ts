// top_logprobs on `rollstream serve`'s OpenAI routes, read by the `openai` npm client: /v1/completions logprobs: k
// gives each token's k most likely alternatives (and the sampled token) as {token: logprob}, /v1/chat/completions
// logprobs + top_logprobs: k gives content[i].top_logprobs, most likely first. Checked against the model's own
// forward pass over the prompt and the completion (log_softmax of the raw logits); positive control: at temperature 1
// the sampled token's own logprob is the reference's, and logprobs: 0 gives the sampled token alone.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import OpenAI from "openai";
import { startServe, type RunningServer } from "../../serve/start.js";
import { promptOf, tinyConfig, tinyModel, tok, writeHfFolder } from "../helpers/serve-fixture.js";

let server: RunningServer;
let dir: string;
let client: OpenAI;
const quiet = { info: () => undefined, error: () => undefined };

before(async () => {
  dir = mkdtempSync(join(tmpdir(), "rs-serve-top-"));
  writeHfFolder(join(dir, "v0"), 3);
  server = await startServe({ source: { kind: "folder", path: join(dir, "v0") }, host: "127.0.0.1", port: 0, threads: 1, log: quiet });
  client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: "none", maxRetries: 0 });
});

after(async () => {
  await server.close();
  rmSync(dir, { recursive: true, force: true });
});

/** log_softmax rows of the model's forward over prompt + completion: row i is the distribution completion[i] was drawn from. */
async function referenceRows(prompt: number[], completion: number[]): Promise<Float64Array[]> {
  const m = tinyModel(3);
  try {
    const tokens = Int32Array.from([...prompt, ...completion]);
    const logits = await m.forward({ tokens, segmentStarts: Int32Array.from([0]) });
    const V = tinyConfig.vocabSize;
    return completion.map((_, i) => {
      const row = logits.subarray((prompt.length - 1 + i) * V, (prompt.length + i) * V);
      const max = Math.max(...row);
      const lse = max + Math.log(row.reduce((s, z) => s + Math.exp(z - max), 0));
      return Float64Array.from(row, (z) => z - lse);
    });
  } finally {
    m.dispose();
  }
}

const topK = (row: Float64Array, k: number) =>
  [...row.keys()]
    .sort((a, b) => row[b]! - row[a]! || a - b)
    .slice(0, k)
    .map((id) => ({ id, lp: row[id]! }));

test("completions logprobs: 3: the 3 most likely tokens of each step and the sampled one, as the model's forward gives them", async () => {
  const prompt = promptOf("2+9=");
  const r = await client.completions.create({
    model: "v0",
    prompt,
    max_tokens: 6,
    seed: 17,
    temperature: 1,
    logprobs: 3,
    // vLLM's extra fields: keys "token_id:N" (byte tokens may decode alike), the completion's ids.
    ...({ return_tokens_as_token_ids: true, return_token_ids: true } as object),
  });
  const c = r.choices[0]! as (typeof r.choices)[0] & { token_ids: number[] };
  const ids = c.token_ids;
  const rows = await referenceRows(prompt, ids);
  const lp = c.logprobs!;
  ids.forEach((id, i) => {
    const dict = lp.top_logprobs![i]!;
    const want = topK(rows[i]!, 3);
    for (const w of want) assert.ok(Math.abs(dict[`token_id:${w.id}`]! - w.lp) < 1e-4, `step ${i}: token ${w.id} ${dict[`token_id:${w.id}`]} vs ${w.lp}`);
    assert.equal(Object.keys(dict).length, want.some((w) => w.id === id) ? 3 : 4, "the 3 most likely, and the sampled token");
    // Positive control: at temperature 1 the sampled token's logprob is its logprob in the model's distribution.
    assert.ok(Math.abs(lp.token_logprobs![i]! - rows[i]![id]!) < 1e-4);
    assert.equal(dict[`token_id:${id}`], lp.token_logprobs![i]);
  });
  // logprobs: 0 is the sampled token alone.
  const zero = await client.completions.create({ model: "v0", prompt, max_tokens: 3, seed: 17, logprobs: 0 });
  assert.ok(zero.choices[0]!.logprobs!.top_logprobs!.every((d) => Object.keys(d).length === 1));
});

test("chat logprobs + top_logprobs: 2: content[i].top_logprobs, most likely first, streamed the same; top_logprobs alone is a 400", async () => {
  const messages = [{ role: "user" as const, content: "4+4=" }];
  const r = await client.chat.completions.create({
    model: "v0",
    messages,
    max_tokens: 5,
    seed: 3,
    logprobs: true,
    top_logprobs: 2,
    ...({ return_token_ids: true } as object),
  });
  const content = r.choices[0]!.logprobs!.content!;
  assert.ok(content.length > 0);
  const prompt = tok.applyChatTemplate(messages, { addGenerationPrompt: true });
  const ids = (r.choices[0] as unknown as { token_ids: number[] }).token_ids;
  assert.equal(ids.length, content.length);
  const rows = await referenceRows(prompt, ids);
  content.forEach((c, i) => {
    assert.equal(c.top_logprobs.length, 2);
    assert.ok(c.top_logprobs[0]!.logprob >= c.top_logprobs[1]!.logprob);
    const want = topK(rows[i]!, 2);
    c.top_logprobs.forEach((t, j) => assert.ok(Math.abs(t.logprob - want[j]!.lp) < 1e-4, `step ${i} rank ${j}`));
    assert.ok(c.top_logprobs[0]!.logprob >= c.logprob - 1e-6, "nothing is more likely than the first");
  });
  const stream = await client.chat.completions.create({ model: "v0", messages, max_tokens: 5, seed: 3, logprobs: true, top_logprobs: 2, stream: true });
  const streamed: number[][] = [];
  for await (const chunk of stream) for (const c of chunk.choices[0]?.logprobs?.content ?? []) streamed.push(c.top_logprobs.map((t) => t.logprob));
  assert.deepEqual(
    streamed,
    content.map((c) => c.top_logprobs.map((t) => t.logprob)),
  );
  await assert.rejects(
    client.chat.completions.create({ model: "v0", messages, max_tokens: 2, top_logprobs: 2 }),
    (e: unknown) => e instanceof OpenAI.BadRequestError,
  );
});

test("/inference/v1/generate logprobs: k: top_logprobs is the sampled entry, then the k most likely others (upstream's render)", async () => {
  const prompt = promptOf("6+3=");
  const post = async (logprobs: number) =>
    (await (
      await fetch(`${server.url}/inference/v1/generate`, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ token_ids: prompt, sampling_params: { max_tokens: 5, seed: 8, logprobs } }),
      })
    ).json()) as {
      choices: {
        token_ids: number[];
        logprobs: {
          content: { token_id: number; logprob: number; rank: number | null; top_logprobs: { token_id: number; logprob: number; rank: number | null }[] }[];
        };
      }[];
    };
  const r = await post(3);
  const c = r.choices[0]!;
  const rows = await referenceRows(prompt, c.token_ids);
  c.logprobs.content.forEach((e, i) => {
    assert.equal(e.top_logprobs.length, 3);
    assert.deepEqual(e.top_logprobs[0], { token_id: e.token_id, logprob: e.logprob, rank: e.rank });
    const want = topK(rows[i]!, 3).filter((w) => w.id !== e.token_id);
    e.top_logprobs.slice(1).forEach((t, j) => {
      assert.equal(t.token_id, want[j]!.id);
      assert.ok(Math.abs(t.logprob - want[j]!.lp) < 1e-4);
    });
    const rank = topK(rows[i]!, 3).findIndex((w) => w.id === e.token_id);
    assert.equal(e.rank, rank >= 0 ? rank + 1 : null);
  });
  // logprobs: 0 is the sampled entry alone (positive control for the k above).
  assert.ok((await post(0)).choices[0]!.logprobs.content.every((e) => e.top_logprobs.length === 1 && e.top_logprobs[0]!.token_id === e.token_id));
});
