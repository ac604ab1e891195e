// The OpenEnv client against a Python test server written from the upstream schemas (test/helpers/openenv_server.py):
// name@version from /metadata, a WebSocket session per rollout whose observation/reward/done loop runs as a
// multi-turn rollout of our policy, and a server that dies mid-episode (the rollout runs again once it is back).
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { loadRemoteEnvironment } from "../../environments/remote/index.js";
import { ScriptedModelClient } from "../../environments/testing/index.js";
import type { Environment } from "../../environments/api/index.js";
import { ByteTokenizer } from "../../kernels/tokenizer.js";
import { startPythonServer, type PythonServer } from "../helpers/python-env-server.js";

const tok = new ByteTokenizer();
const sampling = { temperature: 1, topP: 1, topK: 0, maxTokens: 24 };
const servers: PythonServer[] = [];
after(async () => {
  for (const s of servers) await s.stop();
});

async function server(args: string[] = []): Promise<PythonServer> {
  const s = await startPythonServer("openenv_server.py", args);
  servers.push(s);
  return s;
}

function load(url: string): Promise<Environment> {
  return loadRemoteEnvironment({ id: "openenv:reverse-word", url, version: "0.0.0", deadlineMs: 20_000, retries: 2, connectMs: 20_000, args: {} });
}

/** Replies from the last observation: `wrongFirst` answers the first turn wrongly. */
function player(wrongFirst: boolean) {
  return new ScriptedModelClient(tok, (ctx, call) => {
    const words = [...ctx.matchAll(/Reverse the word: (\w+)/g)];
    const w = words.at(-1)?.[1] ?? "";
    return wrongFirst && call === 0 ? "nope" : [...w].reverse().join("");
  });
}

test("an OpenEnv episode over /ws: reset, a wrong step, a right one; rewards from the server", async () => {
  const s = await server();
  const env = await load(s.address);
  assert.equal(`${env.name}@${env.version}`, "openenv:reverse-word@0.3.1");
  assert.equal(await env.health!(), true);
  const row = env.dataset("train").row(4);
  const model = player(true);
  const r = await env.rollout({ model, sampling }, row);
  assert.equal(r.numTurns, 2);
  assert.equal(r.stopReason, "env_done");
  assert.match(r.messages[0]!.content, /^Reverse the word: \w+$/);
  assert.match(r.messages[2]!.content, /^Not quite\./);
  assert.equal(r.messages.at(-1)!.content, "Correct.", "the final observation is kept in the transcript");
  // The observation after the wrong step is in the tokens the model saw, mask 0.
  const envTokens = r.completionIds.slice(r.turnOffsets[0]! + model.calls[0]!.generation!.tokenIds.length, r.turnOffsets[1]!);
  assert.match(tok.decode(envTokens), /Not quite\. Reverse the word/);
  assert.ok(r.completionMask.slice(r.turnOffsets[0]! + model.calls[0]!.generation!.tokenIds.length, r.turnOffsets[1]!).every((m) => m === 0));
  const [score] = await env.scoreGroup([r], row, {});
  assert.equal(score!.reward, 1);
  assert.equal(score!.metrics["steps"], 2);
  // Positive control: a policy that never reverses scores 0 after two tries.
  const bad = await env.rollout({ model: new ScriptedModelClient(tok, ["no", "still no"]), sampling }, row);
  const [low] = await env.scoreGroup([bad], row, {});
  assert.equal(low!.reward, 0);
  assert.equal(bad.numTurns, 2);
});

test("an OpenEnv server that dies mid-episode: the rollout runs again on the restarted server", async () => {
  const marker = join(mkdtempSync(join(tmpdir(), "rs-openenv-")), "died");
  const first = await server(["--mode", "die", "--marker", marker]);
  const port = new URL(first.address).port;
  const restarted = first.exited.then(() => server(["--mode", "die", "--marker", marker, "--port", port]));
  const env = await load(first.address);
  const model = player(false);
  const r = await env.rollout({ model, sampling }, env.dataset("eval").row(1));
  assert.notEqual(await first.exited, 0);
  await restarted;
  assert.equal(model.calls.length, 2, "one model turn on the server that died, one on the restarted one");
  assert.equal(r.numTurns, 1);
  const [score] = await env.scoreGroup([r], env.dataset("eval").row(1), {});
  assert.equal(score!.reward, 1);
});
