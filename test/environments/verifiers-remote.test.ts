// The verifiers env-server client against a Python test server written from the upstream schemas
// (test/helpers/verifiers_env_server.py): a multi-turn episode whose trace becomes the rollout, a server that
// never answers (deadline → cancel on the server), one that dies mid-episode (run again on the restarted server),
// and one whose trace disagrees with what the engine generated (TraceMismatchError, never a rollout).
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { loadRemoteEnvironment, type RemoteEntry } from "../../environments/remote/index.js";
import { ScriptedModelClient } from "../../environments/testing/index.js";
import { TimeLimitError } from "../../environments/api/index.js";
import { ByteTokenizer } from "../../kernels/tokenizer.js";
import { EndpointServer } from "../../actors/runtime/model-endpoint/endpoint-server.js";
import { startPythonServer, type PythonServer } from "../helpers/python-env-server.js";

const dir = mkdtempSync(join(tmpdir(), "rs-verifiers-"));
const words = ["abc", "hello", "stream", "node", "zmq"];
const taskLines = (turns: number) => words.map((w, i) => JSON.stringify({ name: `t${i}`, prompt: w, answer: [...w].reverse().join(""), turns })).join("\n");
writeFileSync(join(dir, "train.jsonl"), taskLines(2));
writeFileSync(join(dir, "eval.jsonl"), taskLines(1));
const tok = new ByteTokenizer();
const sampling = { temperature: 1, topP: 1, topK: 0, maxTokens: 24 };
const endpoint = await EndpointServer.start({ limits: { vocabSize: tok.vocabSize, contextTokens: 4096 } });
const servers: PythonServer[] = [];
const envs: Array<{ close?: () => Promise<void> }> = [];
after(async () => {
  for (const e of envs) await e.close?.();
  for (const s of servers) await s.stop();
  await endpoint.close();
});

/** The policy: reverses the first user message (so the server's LCS reward is 1). */
const reverser = (version = 3) =>
  new ScriptedModelClient(
    tok,
    (ctx) => {
      const m = /<\|user\|>(.*?)<\|end\|>/s.exec(ctx);
      return [...(m?.[1] ?? "")].reverse().join("");
    },
    { policyVersion: version },
  );

async function server(mode: string, extra: string[] = [], address = "tcp://127.0.0.1:0"): Promise<PythonServer> {
  const s = await startPythonServer("verifiers_env_server.py", ["--address", address, "--mode", mode, "--log", join(dir, `${mode}.log`), ...extra]);
  servers.push(s);
  return s;
}

async function env(address: string, over: Partial<RemoteEntry> = {}) {
  const e = await loadRemoteEnvironment({
    id: "verifiers:reverse-text",
    server: address,
    tasks: { train: join(dir, "train.jsonl"), eval: join(dir, "eval.jsonl") },
    version: "1.2.0",
    deadlineMs: 20_000,
    retries: 2,
    connectMs: 20_000,
    args: {},
    ...over,
  });
  envs.push(e);
  return e;
}

test("a two-turn episode: the trace's tokens become the rollout, checked against the engine; the server's scores pass through", async () => {
  const s = await server("normal");
  const e = await env(s.address);
  assert.equal(`${e.name}@${e.version}`, "verifiers:reverse-text@1.2.0");
  assert.equal(await e.health!(), true);
  const row = e.dataset("train").row(1);
  const model = reverser(3);
  const r = await e.rollout({ model, sampling, endpoint }, row);
  // The prompt is exactly our chat template of the task's prompt, with the generation prompt.
  assert.deepEqual(r.promptIds, tok.applyChatTemplate([{ role: "user", content: "hello" }], { addGenerationPrompt: true }));
  assert.equal(r.numTurns, 2);
  assert.equal(model.calls.length, 2, "the server called our engine once per turn");
  const first = model.calls[0]!.generation!;
  const second = model.calls[1]!.generation!;
  // completion = turn 1 tokens (mask 1), the follow-up user message and generation prompt (mask 0), turn 2 (mask 1).
  assert.deepEqual(r.completionIds.slice(0, first.tokenIds.length), first.tokenIds);
  assert.deepEqual(r.completionIds.slice(r.turnOffsets[1]!), second.tokenIds);
  assert.deepEqual(r.turnOffsets, [0, r.completionIds.length - second.tokenIds.length]);
  const ones = r.completionMask.reduce((a, b) => a + b, 0);
  assert.equal(ones, first.tokenIds.length + second.tokenIds.length);
  assert.deepEqual(r.samplerLogprobs.slice(0, first.tokenIds.length), first.logprobs);
  assert.deepEqual(model.calls[1]!.promptIds, [...r.promptIds, ...r.completionIds.slice(0, r.turnOffsets[1]!)], "turn 2 continued exactly the trace's tokens");
  assert.deepEqual(r.versionSpans, [
    { version: 3, start: 0, end: first.tokenIds.length },
    { version: 3, start: r.turnOffsets[1]!, end: r.completionIds.length },
  ]);
  assert.equal(r.messages.filter((m) => m.role === "assistant").length, 2);
  const [score] = await e.scoreGroup([r], row, {});
  assert.equal(score!.reward, 1);
  assert.deepEqual(score!.components, { lcs: 1, exact: 1 });
  assert.equal(score!.metrics["reply_chars"], 5);
  // A wrong reply scores below 1 on the server: the score is the server's, not a constant.
  const wrong = await e.rollout({ model: new ScriptedModelClient(tok, ["olleh", "xyz"]), sampling, endpoint }, row);
  const [low] = await e.scoreGroup([wrong], row, {});
  assert.ok(low!.reward < 1, `reward ${low!.reward}`);
});

test("a trace whose tokens disagree with the engine's record is refused with the reason", async () => {
  const s = await server("bad-tokens");
  const e = await env(s.address);
  const model = reverser();
  await assert.rejects(e.rollout({ model, sampling, endpoint }, e.dataset("eval").row(0)), (err: Error) => {
    assert.equal(err.name, "TraceMismatchError");
    assert.match(err.message, /turn 0 .* token 0 is \d+ in the trace but the engine sampled \d+/);
    return true;
  });
  assert.equal(model.calls.length, 1, "the engine did serve the call");
});

test("a run past its deadline is cancelled on the server", async () => {
  const s = await server("slow");
  const e = await env(s.address, { deadlineMs: 1_000 });
  await assert.rejects(e.rollout({ model: reverser(), sampling, endpoint }, e.dataset("eval").row(0)), TimeLimitError);
  const log = () => readFileSync(join(dir, "slow.log"), "utf8");
  for (let i = 0; i < 100 && !/cancelled \w+ True/.test(log()); i++) await new Promise((r) => setTimeout(r, 50));
  assert.match(log(), /cancelled \w+ True/, "the server found the run and cancelled it");
  // Shutdown: an aborted rollout cancels its run on the server the same way.
  const ac = new AbortController();
  const pending = e.rollout({ model: reverser(), sampling, endpoint, signal: ac.signal }, e.dataset("eval").row(1));
  await new Promise((r) => setTimeout(r, 200));
  ac.abort(new Error("shutting down"));
  await assert.rejects(pending, /shutting down/);
  for (let i = 0; i < 100 && (log().match(/cancelled \w+ True/g) ?? []).length < 2; i++) await new Promise((r) => setTimeout(r, 50));
  assert.equal((log().match(/cancelled \w+ True/g) ?? []).length, 2, log());
});

test("a server that dies mid-episode: the rollout runs again on the restarted server, once", async () => {
  const marker = join(dir, "died");
  const first = await server("die", ["--marker", marker]);
  const e = await env(first.address);
  const model = reverser();
  const restarted = first.exited.then(() => server("die", ["--marker", marker], first.address));
  const r = await e.rollout({ model, sampling, endpoint }, e.dataset("eval").row(2));
  assert.equal((await first.exited) !== 0, true, "the first server died");
  await restarted;
  // The first attempt's generate call was made (the server died after it); the rollout is the second attempt's.
  assert.equal(model.calls.length, 2);
  assert.deepEqual(r.completionIds, model.calls[1]!.generation!.tokenIds);
  const [score] = await e.scoreGroup([r], e.dataset("eval").row(2), {});
  assert.equal(score!.reward, 1);
});
