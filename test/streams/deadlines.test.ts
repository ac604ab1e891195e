// Every call that can block has a deadline: made to hang (its nats-server SIGSTOPped, or a generation
// longer than its deadline), each fails with an error naming the call instead of hanging. Each case has
// its positive control: the same call answers while the server runs.
import { test } from "node:test";
import assert from "node:assert/strict";
import { connect } from "@nats-io/transport-node";
import { startTestNats, stopProcess } from "../helpers/nats.js";
import { DeadlineError, ensureTopology, NatsSandboxClient, RunChannels } from "../../streams/index.js";
import { PolicyModel } from "../../kernels/index.js";
import { ByteTokenizer } from "../../kernels/tokenizer.js";
import { PolicyEngine } from "../../actors/runtime/policy-engine.js";

async function elapsed<T>(p: Promise<T>): Promise<{ ms: number; error: unknown }> {
  const t0 = Date.now();
  try {
    await p;
    return { ms: Date.now() - t0, error: null };
  } catch (e) {
    return { ms: Date.now() - t0, error: e };
  }
}

test("weight fetches, restore requests and sandbox calls fail at their deadline when the server hangs", async () => {
  const nats = await startTestNats();
  const nc = await connect({ servers: nats.url });
  try {
    const topology = await ensureTopology(nc, "deadlines");
    const channels = new RunChannels(topology.wire);
    await channels.weights.publish({ version: 0, step: 0, phase: "rl", bytes: new Uint8Array(4096).fill(7) });
    const serving = new AbortController();
    void channels.restore.serve(async () => ({ step: -1 }), serving.signal);
    // Positive controls: answered while the server runs.
    assert.equal((await channels.weights.fetch(0, 5_000)).length, 4096);
    assert.equal((await channels.restore.request(5_000)).step, -1);

    await stopProcess(nats.process.pid!);
    try {
      const fetch = await elapsed(channels.weights.fetch(0, 400));
      assert.ok(fetch.error instanceof DeadlineError, `weights: ${fetch.error}`);
      assert.match((fetch.error as Error).message, /^fetch of weights v0: no answer within 400 ms/);
      assert.ok(fetch.ms < 3_000, `weights deadline took ${fetch.ms} ms`);

      const restore = await elapsed(channels.restore.request(400));
      assert.ok(restore.error instanceof Error, "restore request fails");
      assert.ok(restore.ms < 3_000, `restore deadline took ${restore.ms} ms`);

      const sandbox = new NatsSandboxClient(nc, { timeoutMs: 300, retries: 1 });
      const exec = await elapsed(sandbox.exec({ language: "python", code: "print(1)", limits: { wallMs: 200 } }));
      assert.ok(exec.error instanceof Error, "sandbox exec fails");
      assert.ok(exec.ms < 5_000, `sandbox deadline took ${exec.ms} ms`);
    } finally {
      nats.process.kill("SIGCONT");
      serving.abort();
    }
  } finally {
    await nc.close();
    await nats.cleanup();
  }
});

test("a generation past its deadline fails every waiting request and wedges the engine once", async () => {
  const tok = new ByteTokenizer();
  const config = {
    vocabSize: 288,
    hiddenSize: 64,
    intermediateSize: 128,
    numLayers: 2,
    numHeads: 2,
    numKvHeads: 1,
    maxPositionEmbeddings: 512,
    rmsNormEps: 1e-5,
    ropeTheta: 10000,
    tieWordEmbeddings: true,
    attentionBias: false,
  };
  const prompt = tok.applyChatTemplate([{ role: "user", content: "count" }], { addGenerationPrompt: true });
  const sampling = { maxTokens: 400, temperature: 1, topP: 1, topK: 0 };
  const model = PolicyModel.create(config, { seed: 1, threads: 1 });
  try {
    // Positive control: without a deadline the same batch completes.
    const ok = await new PolicyEngine(model, tok, 0, { seed: 3 }).client(1).generate(prompt, sampling);
    assert.ok(ok.tokenIds.length > 0);

    const wedged: Error[] = [];
    const engine = new PolicyEngine(model, tok, 0, { seed: 3, generateDeadlineMs: 1, onWedged: (e) => wedged.push(e) });
    const client = engine.client(1);
    // Eight long distinct prompts: the first step prefills 2048 of their tokens, far longer than 1 ms on any machine.
    const long = (i: number) => [...tok.encode("x".repeat(300 + i)), ...prompt];
    const first = await Promise.allSettled(Array.from({ length: 8 }, (_, i) => client.generate(long(i), sampling)));
    assert.ok(
      first.every((r) => r.status === "rejected" && r.reason instanceof DeadlineError),
      "every request of the step fails with the deadline",
    );
    assert.match(String((first[0] as PromiseRejectedResult).reason.message), /^engine step over 8 sequences: no answer within 1 ms/);
    const later = await elapsed(client.generate(prompt, sampling));
    assert.ok(later.error instanceof DeadlineError, "a wedged engine refuses later requests at once");
    assert.equal(wedged.length, 1, "onWedged is called once");
  } finally {
    model.dispose(); // frees the native model once the abandoned call has finished
  }
});
