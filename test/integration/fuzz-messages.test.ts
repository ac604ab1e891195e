// Our own fuzz test of the wire: seeded structured and byte-level corruptions of every message type an
// actor consumes (tasks, raw rollout groups, scored Arrow batches), published into a live run. Every one
// is dead-lettered with a reason, no actor exits (maxRestarts 0 would leave the run unfinished), and
// the learner trains on full batches of clean rows.
import { test } from "node:test";
import assert from "node:assert/strict";
import { encode } from "@msgpack/msgpack";
import { startRun, storedMessages, storedSteps, waitUntil } from "../helpers/run-fixture.js";
import { mulberry32 } from "../helpers/rng.js";
import { encodeRolloutBatch, encodeRolloutBatchUnchecked } from "../../streams/arrow-codec.js";
import { ContentType, makeHeaders } from "../../streams/headers.js";
import { ROLLOUT_SCHEMA_VERSION, type RolloutRow } from "../../streams/rollout-schema.js";
import { arithmeticTask, testSampling, validRollout, validRow } from "../helpers/rollout-fixtures.js";
import { Hdr, StateKeys } from "../../streams/index.js";

const sampling = testSampling;
type Obj = Record<string, unknown>;

// Plain objects, so a corruption can delete a field or give it the wrong type.
const task = (label: string): Obj => ({ ...arithmeticTask("fuzz", 7, label, 2) });
const rollout = (): Obj => ({ ...validRollout() });
const row = validRow;

// Structured corruptions: each makes the message invalid by schema or by the run's limits.
const taskEdits: Array<(t: Obj) => void> = [
  (t) => delete t["taskId"],
  (t) => (t["groupSize"] = -3),
  (t) => (t["sampling"] = "hot"),
  (t) => (t["exampleIndex"] = 1.5),
  (t) => (t["envKey"] = "nosuchenv"),
];
const rolloutEdits: Array<(r: Obj) => void> = [
  (r) => (r["samplerLogprobs"] = [Number.NaN, -1]),
  (r) => (r["samplerLogprobs"] = [Number.POSITIVE_INFINITY, -1]),
  (r) => (r["completionIds"] = [-4, 263]),
  (r) => (r["completionMask"] = [1]),
  (r) => (r["completionIds"] = [51, 4096]),
  (r) => (r["messages"] = [{ role: "robot", content: "x" }]),
  (r) => (r["turnOffsets"] = [5, 1]),
  (r) => (r["state"] = "not an object"),
];

test("seeded corruptions of every consumed message type are all dead-lettered; the run trains on clean rows only", async () => {
  const run = await startRun("fuzz", { rl: { steps: 3, batchSize: 8, groupSize: 4, maxAsyncLevel: 1, maxOffPolicySteps: 2, sampling } });
  const rng = mulberry32(20261201);
  try {
    for (const name of ["checkpoint", "learner", "orchestrator", "inference", "reward"]) run.launcher.start({ name, replica: 0 });
    await waitUntil("policy v0", async () => (await run.state.policyVersion()) >= 0, 30_000, `${run.dir}/logs`);
    const subjects = run.topology.names.subjects;
    const msgpack = { headers: makeHeaders({ contentType: ContentType.msgpack }) };
    let published = 0;
    const pub = async (subject: string, data: Uint8Array, id: string, headers = msgpack.headers) => {
      await run.js.publish(subject, data, { msgID: id, headers });
      published++;
    };
    // Byte-level: truncations and garbage of valid encodings (a cut msgpack or Arrow message never decodes).
    const validTask = encode(task("bytes"));
    const validGroup = encode({ task: task("bytes-g"), rollouts: [rollout(), rollout()], producer: "fuzz" });
    const meta = { run: "fuzz", schemaVersion: ROLLOUT_SCHEMA_VERSION, producer: "fuzz", createdAt: new Date().toISOString() };
    const validBatch = encodeRolloutBatch(
      [0, 1, 2, 3].map((i) => row("bytes-s", i)),
      meta,
    );
    const arrowHeaders = makeHeaders({ contentType: ContentType.arrow });
    for (let k = 0; k < 4; k++) {
      const cut = (b: Uint8Array) => b.slice(0, 1 + Math.floor(rng() * (b.length - 2)));
      await pub(subjects.tasks, cut(validTask), `bt-${k}`);
      await pub(subjects.rolloutsRaw, cut(validGroup), `bg-${k}`);
      await pub(subjects.rolloutsScored, cut(validBatch), `bs-${k}`, arrowHeaders);
    }
    const garbage = Uint8Array.from({ length: 64 }, () => Math.floor(rng() * 256));
    garbage[0] = 0xc1; // never a valid msgpack first byte, never an Arrow stream
    await pub(subjects.tasks, garbage, "garbage-t");
    await pub(subjects.rolloutsRaw, garbage, "garbage-g");
    await pub(subjects.rolloutsScored, garbage, "garbage-s", arrowHeaders);
    // Structured: a valid message with one field made wrong.
    for (const [k, edit] of taskEdits.entries()) {
      const t = task(`st-${k}`);
      edit(t);
      await pub(subjects.tasks, encode(t), `st-${k}`);
    }
    for (const [k, edit] of rolloutEdits.entries()) {
      const bad = rollout();
      edit(bad);
      await pub(subjects.rolloutsRaw, encode({ task: task(`sg-${k}`), rollouts: [rollout(), bad], producer: "fuzz" }), `sg-${k}`);
    }
    // Scored batches that are valid Arrow but break the row contract, written past the encoder's checks.
    const scoredEdits: Array<(r: RolloutRow) => void> = [
      (r) => (r.samplerLogprobs = Float32Array.from([-1])), // one logprob for two tokens
      (r) => (r.completionMask = Uint8Array.from([1, 7])),
      (r) => (r.samplerLogprobs = Float32Array.from([Number.NaN, -1])),
      (r) => (r.promptIds = Int32Array.from([-1, 5])),
    ];
    for (const [k, edit] of scoredEdits.entries()) {
      const rows = [0, 1, 2, 3].map((i) => row(`ss-${k}`, i));
      edit(rows[2]!);
      await pub(subjects.rolloutsScored, encodeRolloutBatchUnchecked(rows, meta), `ss-${k}`, arrowHeaders);
    }

    await waitUntil("run done", async () => (await run.state.get(StateKeys.runStatus)) === "done", 60_000, `${run.dir}/logs`);
    await waitUntil(
      "every corrupt message dead-lettered",
      async () => (await storedMessages(run.topology.jsm, run.topology.names.streams.events, subjects.dlq)).length >= published,
      20_000,
    );
    const dead = await storedMessages(run.topology.jsm, run.topology.names.streams.events, subjects.dlq);
    for (const m of dead) assert.ok((m.header?.get(Hdr.error) ?? "").length > 0, `dead letter ${m.seq} has a reason`);
    assert.equal(dead.length, published, `${dead.length} dead letters for ${published} corrupt messages`);
    const fromSubjects = new Set(dead.map((m) => m.header?.get(Hdr.originalSubject)));
    assert.deepEqual([...fromSubjects].sort(), [subjects.rolloutsRaw, subjects.rolloutsScored, subjects.tasks].sort(), "every message type was exercised");
    const steps = await storedSteps(run);
    assert.equal(steps.length, 3, "every step trained");
    for (const e of steps) assert.ok(e.rows.trained >= 8);
  } finally {
    await run.close();
  }
});
