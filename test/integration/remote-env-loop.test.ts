// A verifiers env-server in the loop: the orchestrator feeds its tasks, inference serves the server's model calls
// over its engine and publishes the traces as raw groups, reward passes the server's scores through, the learner
// steps. The Python test server (test/helpers/verifiers_env_server.py) dies mid-episode once and is restarted at
// the same address: every task is published exactly once. A server whose traces disagree with the engine's tokens
// gets its tasks dead-lettered with the reason, and nothing of it is trained. An OpenEnv server's episodes, played
// by our engine over /ws (test/helpers/openenv_server.py), are trained the same way.
import { test } from "node:test";
import assert from "node:assert/strict";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { startRun, storedMessages, waitUntil } from "../helpers/run-fixture.js";
import { startPythonServer, type PythonServer } from "../helpers/python-env-server.js";
import { decodeRolloutBatch } from "../../streams/arrow-codec.js";
import { decode } from "@msgpack/msgpack";
import { HealthBoard } from "../../streams/index.js";

const model = {
  vocabSize: 288,
  hiddenSize: 32,
  intermediateSize: 64,
  numLayers: 1,
  numHeads: 2,
  numKvHeads: 1,
  maxPositionEmbeddings: 96,
  threads: 1,
  seed: 5,
};

function writeTasks(dir: string): { train: string; eval: string } {
  const word = (i: number) => ["ab", "cat", "dog", "sun", "tree", "moon"][i % 6]! + String(i % 10);
  const lines = (n: number, turns: number) =>
    Array.from({ length: n }, (_, i) => JSON.stringify({ name: `w${i}`, prompt: word(i), answer: [...word(i)].reverse().join(""), turns })).join("\n");
  writeFileSync(join(dir, "train.jsonl"), lines(40, 2));
  writeFileSync(join(dir, "eval.jsonl"), lines(8, 1));
  return { train: join(dir, "train.jsonl"), eval: join(dir, "eval.jsonl") };
}

function remoteRun(name: string, address: string, dir: string) {
  return startRun(name, {
    model,
    environments: [{ id: "verifiers:reverse-text", server: address, tasks: writeTasks(dir), version: "1.2.0", deadlineMs: 60_000, connectMs: 60_000 }],
    rl: { steps: 3, batchSize: 8, groupSize: 4, maxAsyncLevel: 1, maxOffPolicySteps: 2, sampling: { temperature: 1, topP: 1, topK: 0, maxTokens: 6 } },
  });
}

test("a verifiers env-server in the loop: it dies mid-episode, is restarted, and every task is published once", async () => {
  const { mkdtempSync } = await import("node:fs");
  const { tmpdir } = await import("node:os");
  const dir = mkdtempSync(join(tmpdir(), "rs-vf-loop-"));
  const servers: PythonServer[] = [];
  const log = join(dir, "server.log");
  const start = async (address: string) => {
    const s = await startPythonServer("verifiers_env_server.py", ["--address", address, "--mode", "die", "--marker", join(dir, "died"), "--log", log]);
    servers.push(s);
    return s;
  };
  const first = await start("tcp://127.0.0.1:0");
  const restarted = first.exited.then(() => start(first.address));
  const run = await remoteRun("vfloop", first.address, dir);
  try {
    for (const name of ["checkpoint", "learner", "orchestrator", "reward", "inference"]) run.launcher.start({ name, replica: 0 });
    // The inference actor's heartbeat says whether the env server answered its last health check.
    const remoteHealth = async () =>
      (await new HealthBoard(run.topology.wire.health).read()).find((e) => e.heartbeat?.actor === "inference" && !e.exited)?.heartbeat?.remoteEnvs?.[0];
    await waitUntil("the env server's health in inference's heartbeat", async () => (await remoteHealth())?.healthy === true, 60_000, `${run.dir}/logs`);
    assert.equal((await remoteHealth())!.env, "verifiers:reverse-text@1.2.0");
    await waitUntil("3 RL steps", async () => (await run.state.learnerStep()) >= 3, 180_000, `${run.dir}/logs`);
    assert.notEqual(await first.exited, 0, "the first server died mid-episode");
    await restarted;
    const { jsm, names } = run.topology;
    const raw = await storedMessages(jsm, names.streams.rollouts, names.subjects.rolloutsRaw);
    const taskIds = raw.map((m) => (decode(m.data) as { task: { taskId: string } }).task.taskId);
    assert.equal(new Set(taskIds).size, taskIds.length, `each task published once: ${taskIds.join(", ")}`);
    const rows = (await storedMessages(jsm, names.streams.rollouts, names.subjects.rolloutsScored)).flatMap((m) => decodeRolloutBatch(m.data).rows);
    assert.ok(rows.length >= 24, `${rows.length} scored rows`);
    for (const r of rows) {
      assert.equal(r.env, "verifiers:reverse-text@1.2.0");
      // The server's rubric: reward = lcs × 1 + exact × 0 (weights on the trace), passed through as computed there.
      assert.deepEqual(Object.keys(r.rewardComponents).sort(), ["exact", "lcs"]);
      assert.equal(r.reward, Math.fround(r.rewardComponents["lcs"]!));
      assert.ok("reply_chars" in r.metrics, JSON.stringify(r.metrics));
      assert.equal(r.numTurns, 2);
      assert.equal(r.turnOffsets.length, 2);
    }
  } finally {
    await run.close();
    for (const s of servers) await s.stop();
  }
});

test("a server whose traces disagree with the engine: its tasks are dead-lettered with the reason, never trained", async () => {
  const { mkdtempSync } = await import("node:fs");
  const { tmpdir } = await import("node:os");
  const dir = mkdtempSync(join(tmpdir(), "rs-vf-bad-"));
  const server = await startPythonServer("verifiers_env_server.py", ["--mode", "bad-tokens"]);
  const run = await remoteRun("vfbad", server.address, dir);
  try {
    for (const name of ["checkpoint", "learner", "orchestrator", "reward", "inference"]) run.launcher.start({ name, replica: 0 });
    const { jsm, names } = run.topology;
    const dead = async () =>
      (await storedMessages(jsm, names.streams.events, names.subjects.dlq)).filter((m) => /^trace: /.test(m.header?.get("Rs-Error") ?? ""));
    await waitUntil("a dead-lettered task", async () => (await dead()).length >= 2, 120_000, `${run.dir}/logs`);
    const [first] = await dead();
    assert.match(
      first!.header.get("Rs-Error"),
      /^trace: rollout \d of task .*: trace \w+ turn 0 \(node \d+\): token 0 is \d+ in the trace but the engine sampled \d+/,
    );
    assert.equal((await storedMessages(jsm, names.streams.rollouts, names.subjects.rolloutsRaw)).length, 0, "nothing reached the learner");
  } finally {
    await run.close();
    await server.stop();
  }
});

test("an OpenEnv server in the loop: its episodes are rolled out by our engine and trained, rewards from the server", async () => {
  const server = await startPythonServer("openenv_server.py", []);
  const run = await startRun("oeloop", {
    model,
    environments: [{ id: "openenv:reverse-word", url: server.address, args: { maxTurns: 2 } }],
    rl: { steps: 2, batchSize: 8, groupSize: 4, maxAsyncLevel: 1, maxOffPolicySteps: 2, sampling: { temperature: 1, topP: 1, topK: 0, maxTokens: 6 } },
  });
  try {
    for (const name of ["checkpoint", "learner", "orchestrator", "reward", "inference"]) run.launcher.start({ name, replica: 0 });
    await waitUntil("2 RL steps", async () => (await run.state.learnerStep()) >= 2, 120_000, `${run.dir}/logs`);
    const { jsm, names } = run.topology;
    const rows = (await storedMessages(jsm, names.streams.rollouts, names.subjects.rolloutsScored)).flatMap((m) => decodeRolloutBatch(m.data).rows);
    assert.ok(rows.length >= 16, `${rows.length} scored rows`);
    for (const r of rows) {
      assert.equal(r.env, "openenv:reverse-word@0.3.1");
      assert.match(r.messages[0]!.content, /^Reverse the word: \w+$/, "the prompt is the server's first observation");
      assert.ok(r.numTurns >= 1 && r.numTurns <= 2);
      assert.equal(r.reward, r.rewardComponents["reward"]);
    }
  } finally {
    await run.close();
    await server.stop();
  }
});
