// The fleet's coalescing for `rollstream serve`: a group's rollouts asking the same server for the same prompt in
// one turn go as one request with n choices; each caller gets its own choice; a caller that aborts gets its abort
// and the others their answers; different prompts stay separate requests.
import { test } from "node:test";
import assert from "node:assert/strict";
import { CoalescingServer, type ManyServer } from "../../actors/inference/fleet/coalesce.js";
import type { Segment, SegmentRequest } from "../../actors/inference/fleet/engine-server.js";

function fakeServer() {
  const calls: { n: number; tokenIds: number[]; seed: number }[] = [];
  const seg = (seed: number): Segment => ({ tokenIds: [seed], logprobs: [-0.5], finish: "length" });
  let release: () => void = () => undefined;
  const gate = new Promise<void>((r) => (release = r));
  const server: ManyServer = {
    url: "http://fake",
    loadAdapter: async () => undefined,
    unloadAdapter: async () => undefined,
    async generate(req) {
      calls.push({ n: 1, tokenIds: req.tokenIds, seed: req.seed });
      await gate;
      return seg(req.seed);
    },
    async generateMany(req, n) {
      calls.push({ n, tokenIds: req.tokenIds, seed: req.seed });
      await gate;
      return Array.from({ length: n }, (_, i) => seg(req.seed + i));
    },
    loadWeights: async () => undefined,
    healthy: async () => true,
  };
  return { server, calls, release: () => release() };
}

const req = (tokenIds: number[], seed: number): SegmentRequest => ({
  requestId: `r${seed}`,
  tokenIds,
  maxTokens: 4,
  temperature: 1,
  topP: 1,
  topK: 0,
  seed,
  stopTokenIds: [1],
  cacheKey: "run:v0",
});

test("same prompt in one turn: one request with n; other prompts apart; an abort ends only its caller", async () => {
  const f = fakeServer();
  const c = new CoalescingServer(f.server);
  const opts = { deadlineMs: 1000 };
  const ac = new AbortController();
  const group = [0, 1, 2, 3].map((i) => c.generate(req([5, 6, 7], 100 + i), i === 2 ? { ...opts, signal: ac.signal } : opts));
  const other = c.generate(req([5, 6, 8], 200), opts);
  await new Promise((r) => setImmediate(r));
  assert.deepEqual(f.calls.map((x) => x.n).sort(), [1, 4], "the group as one request of n=4, the other prompt alone");
  ac.abort(new Error("this rollout was cancelled"));
  f.release();
  const results = await Promise.allSettled(group);
  assert.equal(results[2]!.status, "rejected");
  assert.match(String((results[2] as PromiseRejectedResult).reason), /cancelled/);
  assert.deepEqual(
    results.filter((r) => r.status === "fulfilled").map((r) => (r as PromiseFulfilledResult<Segment>).value.tokenIds[0]),
    [100, 101, 103],
    "choice i to the i-th caller (seed of the first + i)",
  );
  assert.deepEqual((await other).tokenIds, [200]);
  // A later turn is a new request (positive control of the per-turn window).
  const later = c.generate(req([5, 6, 7], 300), opts);
  await new Promise((r) => setImmediate(r));
  assert.equal(f.calls.length, 3);
  assert.deepEqual((await later).tokenIds, [300]);
});
