// A server with a small max_payload: raw groups outgrow it and travel through the blob bucket, scored
// batches are split into several complete Arrow messages, and the run trains on every sample anyway.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { cliMain, startRun, storedMessages, waitUntil } from "../helpers/run-fixture.js";
import { StateKeys } from "../../streams/index.js";
import { Hdr } from "../../streams/headers.js";
import { decodeRolloutBatch } from "../../streams/arrow-codec.js";
import { blobOf, readPayload } from "../../streams/large-payload.js";
import { decodeMsgpack } from "../../streams/msgpack-codec.js";
import { RawRolloutGroupSchema } from "../../streams/messages.js";

// Small enough that groups and single rows overflow it; an empty v2 Arrow batch (schema in the IPC stream) is ~5.4 KB.
const MAX_PAYLOAD = 12 * 1024;

test("groups larger than max_payload go via the blob bucket and batches are chunked: nothing is lost", async () => {
  const run = await startRun(
    "bigmsg",
    {
      rl: { steps: 2, batchSize: 32, groupSize: 32, maxAsyncLevel: 1, maxOffPolicySteps: 2, sampling: { temperature: 1, topP: 1, topK: 0, maxTokens: 16 } },
      checkpoint: { interval: 2, keepLast: 1, keepVersions: 2 },
    },
    { maxPayloadBytes: MAX_PAYLOAD },
  );
  try {
    assert.equal(run.nc.info?.max_payload, MAX_PAYLOAD);
    for (const name of ["checkpoint", "learner", "orchestrator", "reward", "inference"]) run.launcher.start({ name, replica: 0 });
    await waitUntil("run done", async () => (await run.state.get(StateKeys.runStatus)) === "done", 150_000, `${run.dir}/logs`);
    assert.equal(await run.state.learnerStep(), 2);

    const { jsm, names, blobs } = run.topology;
    let pointers = 0;
    let rawGroups = 0;
    const scoredRows = new Map<string, number>();
    const chunksOf = new Map<string, Set<string>>();
    for (const m of await storedMessages(jsm, names.streams.rollouts)) {
      const msg = { data: m.data, headers: m.header };
      if (m.subject === names.subjects.rolloutsRaw) {
        rawGroups++;
        if (blobOf(msg)) {
          pointers++;
          assert.equal(m.data.byteLength, 0);
        }
        const group = decodeMsgpack(RawRolloutGroupSchema, await readPayload(msg, blobs), "raw group");
        assert.equal(group.rollouts.length, 32);
      } else if (m.subject === names.subjects.rolloutsScored) {
        assert.ok(m.data.byteLength <= MAX_PAYLOAD, `scored chunk of ${m.data.byteLength} bytes fits in a message`);
        const { rows, meta } = decodeRolloutBatch(await readPayload(msg, blobs));
        const id = String(meta.batchId);
        scoredRows.set(id, (scoredRows.get(id) ?? 0) + rows.length);
        chunksOf.set(id, (chunksOf.get(id) ?? new Set()).add(String(m.header?.get(Hdr.chunk))));
      }
    }
    assert.ok(rawGroups >= 2, `${rawGroups} raw groups`);
    assert.equal(pointers, rawGroups, "every 32-sample group outgrew 8 KB and went through the blob bucket");
    assert.ok((await blobs.list()).length >= rawGroups);
    for (const [id, n] of scoredRows) {
      assert.equal(n, 32, `group ${id}: all 32 scored rows arrived`);
      assert.ok(chunksOf.get(id)!.size > 1, `group ${id} was split into several messages`);
    }
    // Nothing was dead-lettered on the way.
    const events = await jsm.streams.info(names.streams.events, { subjects_filter: names.subjects.dlq });
    assert.equal(events.state.subjects?.[names.subjects.dlq] ?? 0, 0);

    // `rollstream inspect` resolves a pointer and shows the group.
    const r = spawnSync(process.execPath, [cliMain, "inspect", "--config", run.configPath, "--nats", run.nats.url, "--subject", names.subjects.rolloutsRaw], {
      encoding: "utf8",
    });
    assert.equal(r.status, 0, r.stderr);
    assert.match(r.stdout, /payload in blob raw:/);
    assert.match(r.stdout, /"rollouts":\[/);
  } finally {
    await run.close();
  }
});
