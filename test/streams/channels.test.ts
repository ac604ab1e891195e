// Typed channels and the typed KV against a real nats-server: what goes out is validated, what comes
// in is decoded or dead-lettered with the reason, and every KV key has a schema.
import { test } from "node:test";
import assert from "node:assert/strict";
import { connect } from "@nats-io/transport-node";
import { jetstreamManager } from "@nats-io/jetstream";
import { startTestNats } from "../helpers/nats.js";
import { storedMessages } from "../helpers/run-fixture.js";
import { ensureTopology, Hdr, RunChannels, RunState, StateKeys, StateKeySchemas, type EvalMessage, type Task } from "../../streams/index.js";

const sampling = { temperature: 1, topP: 1, topK: 0, maxTokens: 4 };

test("eval channel: results and samples are validated, readable by headers, and stored once per msg-id", async () => {
  const srv = await startTestNats();
  const nc = await connect({ servers: srv.url });
  try {
    const topo = await ensureTopology(nc, "chan");
    const ch = new RunChannels(topo.wire);
    const result: EvalMessage = {
      kind: "result",
      run: "chan",
      version: 3,
      env: "arithmetic@1.0.0",
      n: 20,
      passAt1: 0.5,
      passAtK: { "4": 0.8 },
      rewardMean: 0.55,
      rewardStd: 0.1,
      completionTokensMean: 7.5,
      stopReasons: { eos: 20 },
      seconds: 1.2,
    };
    await ch.eval.publish(result);
    const again = await ch.eval.publish(result);
    assert.equal(again.duplicate, true, "a re-evaluated version is stored once");
    await assert.rejects(ch.eval.publish({ ...result, passAt1: Number.NaN }), /refusing to publish an invalid message: passAt1/);
    const stored = await storedMessages(await jetstreamManager(nc), topo.names.streams.events, topo.names.subjects.eval);
    assert.equal(stored.length, 1);
    assert.equal(stored[0]!.header?.get(Hdr.policyVersion), "3");
    assert.equal(stored[0]!.header?.get(Hdr.env), "arithmetic@1.0.0");
    assert.deepEqual(await ch.eval.decodeMessage({ data: stored[0]!.data, headers: stored[0]!.header }), result);
  } finally {
    await nc.close();
    await srv.cleanup();
  }
});

test("task channel consume: a bad message is dead-lettered with the reason and the good ones are handled", async () => {
  const srv = await startTestNats();
  const nc = await connect({ servers: srv.url });
  const abort = new AbortController();
  try {
    const topo = await ensureTopology(nc, "chan2");
    const ch = new RunChannels(topo.wire);
    const task = (i: number): Task => ({
      run: "chan2",
      taskId: `chan2:0:${i}`,
      epoch: 0,
      index: i,
      step: 0,
      env: "e@1",
      envKey: "e",
      exampleIndex: i,
      groupSize: 2,
      sampling,
      seed: i,
    });
    await ch.tasks.publish(task(0));
    await topo.wire.js.publish(topo.names.subjects.tasks, new TextEncoder().encode("not msgpack at all"));
    await ch.tasks.publish(task(1));
    const seen: string[] = [];
    const done = ch.tasks.consume(
      async (t) => {
        seen.push(t.taskId);
        if (seen.length === 2) setTimeout(() => abort.abort(), 300);
      },
      { maxInFlight: 2, actor: "test", signal: abort.signal },
    );
    await done;
    assert.deepEqual(seen.sort(), ["chan2:0:0", "chan2:0:1"]);
    const dead = await storedMessages(await jetstreamManager(nc), topo.names.streams.events, topo.names.subjects.dlq);
    assert.equal(dead.length, 1);
    assert.match(dead[0]!.header?.get(Hdr.error) ?? "", /^task: not valid MessagePack/);
    assert.equal(dead[0]!.header?.get(Hdr.originalSubject), topo.names.subjects.tasks);
    assert.equal(await ch.tasks.backlog(), 0, "everything was acked");
  } finally {
    abort.abort();
    await nc.close();
    await srv.cleanup();
  }
});

test("every state key has a schema; bad values are refused on put and named on get", async () => {
  for (const k of Object.values(StateKeys)) assert.ok(k in StateKeySchemas, `${k} has a schema`);
  const srv = await startTestNats();
  const nc = await connect({ servers: srv.url });
  try {
    const topo = await ensureTopology(nc, "chan3");
    const state = new RunState(topo.kv);
    await state.put(StateKeys.learnerStarved, { step: 4, missing: 12 });
    assert.deepEqual(await state.get(StateKeys.learnerStarved), { step: 4, missing: 12 });
    await assert.rejects(state.put(StateKeys.learnerStarved, { step: -1, missing: 2 }), /refusing to write KV key learner.starved: step/);
    await assert.rejects(state.put(StateKeys.runStatus, "finished" as never), /run.status/);
    // A foreign writer (the nats CLI, an old version) is reported with the key, never cast through.
    await topo.kv.put(StateKeys.policyVersion, '"seven"');
    await assert.rejects(
      state.get(StateKeys.policyVersion),
      /^StateValueError: run state: KV rs-chan3-state policy\.version = .* does not match its schema .*number/,
    );
    await topo.kv.put(StateKeys.learnerStep, "{not json");
    await assert.rejects(state.get(StateKeys.learnerStep), /^StateValueError: run state: KV rs-chan3-state learner\.step is not valid JSON \("\{not json"\)$/);
    await topo.kv.put(StateKeys.learnerStep, "3");
    assert.equal(await state.learnerStep(), 3);
  } finally {
    await nc.close();
    await srv.cleanup();
  }
});
