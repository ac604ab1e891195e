// The code environment in the loop: reward scores completions by running hidden unit tests through
// the sandbox actor (a separate process, over NATS), and the rows carry the rubric's components.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Svcm } from "@nats-io/services";
import { startRun, storedMessages, waitUntil } from "../helpers/run-fixture.js";
import { decodeRolloutBatch } from "../../streams/arrow-codec.js";

test("code environment: rollouts are graded in the sandbox service and the loop steps on them", async () => {
  const run = await startRun("codeloop", {
    model: { vocabSize: 288, hiddenSize: 64, intermediateSize: 128, numLayers: 2, numHeads: 4, numKvHeads: 2, maxPositionEmbeddings: 768, threads: 2, seed: 5 },
    environments: [{ id: "code@^1", args: {} }],
    // A short SFT on the reference solutions teaches the reply format (a ```python block), so the
    // completions contain code that the rubric sends to the sandbox.
    sft: { steps: 150, batchSize: 8, optimizer: { lr: 0.005, schedule: "cosine", warmupSteps: 10, minLr: 0.0005 } },
    rl: { steps: 2, batchSize: 4, groupSize: 4, maxAsyncLevel: 1, sampling: { temperature: 0.5, topP: 1, topK: 0, maxTokens: 160 } },
    sandbox: { poolSize: 1 },
  });
  try {
    for (const name of ["sandbox", "checkpoint", "learner", "orchestrator", "reward", "inference"]) run.launcher.start({ name, replica: 0 });
    await waitUntil("2 RL steps", async () => (await run.state.learnerStep()) >= 2, 120_000, `${run.dir}/logs`);
    const m = await run.topology.jsm.streams.getMessage(run.topology.names.streams.rollouts, { last_by_subj: run.topology.names.subjects.rolloutsScored });
    const { rows } = decodeRolloutBatch(m!.data);
    assert.equal(rows.length, 4);
    assert.match(rows[0]!.env, /^code@1\.\d+\.\d+$/);
    assert.ok("pass_rate" in rows[0]!.rewardComponents || Object.keys(rows[0]!.rewardComponents).length > 0);
    // The sandbox service did the grading: one request (a batch of the hidden tests, or one program running
    // them all) per completion that held a code block.
    const scored = (await storedMessages(run.topology.jsm, run.topology.names.streams.rollouts, run.topology.names.subjects.rolloutsScored)).flatMap(
      (msg) => decodeRolloutBatch(msg.data).rows,
    );
    const withCode = scored.filter((r) => !r.errors.some((e) => /no code/.test(e)));
    const client = new Svcm(run.nc as never).client();
    let requests = 0;
    for await (const s of await client.stats("rollstream-sandbox")) {
      for (const e of s.endpoints ?? []) requests += e.num_requests;
    }
    const { ByteTokenizer } = await import("../../kernels/tokenizer.js");
    const tok = new ByteTokenizer();
    const what = `sandbox served ${requests} requests for ${withCode.length} of ${scored.length} completions with code; completions ${JSON.stringify(rows.map((r) => tok.decode(r.completionIds)))}`;
    assert.ok(withCode.length >= 1, what);
    assert.ok(requests >= withCode.length, what);
  } finally {
    await run.close();
  }
});
