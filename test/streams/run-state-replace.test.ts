// RunState.read and RunState.replace, what repairs stand on: a bad value is read as an error naming the bucket, key
// and value (with its revision), never thrown; replace writes or deletes only the revision it was given, so a value the
// key's owner wrote meanwhile wins (the control: the same call on the current revision does write).
import { test } from "node:test";
import assert from "node:assert/strict";
import { connect } from "@nats-io/transport-node";
import { startTestNats } from "../helpers/nats.js";
import { ensureTopology, RunState, StateKeys } from "../../streams/index.js";

test("read names a bad value without throwing; replace is a compare-and-set on the revision, for a write and for a delete", async () => {
  const srv = await startTestNats();
  const nc = await connect({ servers: srv.url });
  try {
    const topo = await ensureTopology(nc, "casrun");
    const state = new RunState(topo.kv);
    assert.equal(await state.read(StateKeys.policyVersion), undefined);
    const bad = await topo.kv.put(StateKeys.policyVersion, "{oops");
    const read = await state.read(StateKeys.policyVersion);
    assert.ok(read && "error" in read);
    assert.equal(read.revision, bad);
    assert.equal(read.error.message, 'run state: KV rs-casrun-state policy.version is not valid JSON ("{oops")');
    assert.deepEqual([read.error.key, read.error.raw, read.error.reason], ["policy.version", '"{oops"', "not valid JSON"]);

    // The owner writes meanwhile: a repair of the old revision leaves its value alone.
    await state.put(StateKeys.policyVersion, 5);
    assert.equal(await state.replace(StateKeys.policyVersion, bad, 3), false);
    assert.equal(await state.get(StateKeys.policyVersion), 5);
    const current = (await state.read(StateKeys.policyVersion))!.revision;
    assert.equal(await state.replace(StateKeys.policyVersion, current, 3), true, "the control: the current revision is replaced");
    assert.equal(await state.get(StateKeys.policyVersion), 3);

    const starved = await topo.kv.put(StateKeys.learnerStarved, "garbage");
    await state.put(StateKeys.learnerStarved, { step: 2, missing: 1 });
    assert.equal(await state.replace(StateKeys.learnerStarved, starved, undefined), false, "a stale delete deletes nothing");
    assert.deepEqual(await state.get(StateKeys.learnerStarved), { step: 2, missing: 1 });
    const now = (await state.read(StateKeys.learnerStarved))!.revision;
    assert.equal(await state.replace(StateKeys.learnerStarved, now, undefined), true);
    assert.equal(await state.get(StateKeys.learnerStarved), undefined);
  } finally {
    await nc.close();
    await srv.cleanup();
  }
});
