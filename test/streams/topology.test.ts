import { test } from "node:test";
import assert from "node:assert/strict";
import { connect } from "@nats-io/transport-node";
import { jetstream, RetentionPolicy } from "@nats-io/jetstream";
import { startTestNats } from "../helpers/nats.js";
import { ensureTopology, deleteTopology } from "../../streams/topology.js";
import { runNames } from "../../streams/subjects.js";
import { RunState } from "../../streams/run-state.js";

test("topology creation is idempotent and keeps messages and consumer state across re-creation", async () => {
  const srv = await startTestNats();
  const nc = await connect({ servers: srv.url });
  try {
    const t1 = await ensureTopology(nc, "topo-a");
    const names = runNames("topo-a");
    const js = jetstream(nc);
    await js.publish(names.subjects.tasks, new Uint8Array([1]), { msgID: "x" });
    await js.publish(names.subjects.rolloutsRaw, new Uint8Array([2]));
    await new RunState(t1.kv).put("policy.version", 3);

    // Concurrent and repeated creation (several actors start at once) must neither fail nor reset anything.
    await Promise.all([ensureTopology(nc, "topo-a"), ensureTopology(nc, "topo-a"), ensureTopology(nc, "topo-a")]);
    const t2 = await ensureTopology(nc, "topo-a");
    const tasks = await t2.jsm.streams.info(names.streams.tasks);
    assert.equal(tasks.state.messages, 1);
    assert.equal(tasks.config.retention, RetentionPolicy.Workqueue);
    const rollouts = await t2.jsm.streams.info(names.streams.rollouts);
    assert.equal(rollouts.config.retention, RetentionPolicy.Limits);
    assert.deepEqual([...rollouts.config.subjects].sort(), [names.subjects.rolloutsRaw, names.subjects.rolloutsScored].sort());
    const consumers: string[] = [];
    for (const s of Object.values(names.streams)) for await (const c of t2.jsm.consumers.list(s)) consumers.push(c.name);
    assert.deepEqual(consumers.sort(), ["checkpoint", "inference", "reward"]);
    assert.equal(await new RunState(t2.kv).policyVersion(), 3);
    // Changed timeouts are applied to the existing consumer without losing its position.
    await ensureTopology(nc, "topo-a", { taskAckWaitMs: 5000, maxDeliver: 3 });
    const ci = await t2.jsm.consumers.info(names.streams.tasks, "inference");
    assert.equal(ci.config.ack_wait, 5000 * 1_000_000);
    assert.equal(ci.config.max_deliver, 3);
    assert.equal(ci.num_pending, 1);
    // A second run's objects are separate.
    await ensureTopology(nc, "topo-b");
    assert.equal((await t2.jsm.streams.info(runNames("topo-b").streams.tasks)).state.messages, 0);
    await deleteTopology(nc, "topo-a");
    await assert.rejects(t2.jsm.streams.info(names.streams.tasks));
  } finally {
    await nc.close();
    await srv.cleanup();
  }
});

test("run names are validated", () => {
  assert.throws(() => runNames("bad name"), /invalid run name/);
  assert.throws(() => runNames("a.b"), /invalid run name/);
  assert.equal(runNames("demo-1").streams.tasks, "RS_DEMO_1_TASKS");
});
