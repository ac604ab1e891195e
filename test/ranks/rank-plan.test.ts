// The learner ranks' pieces that need no MPI job: rank 0's plans survive the bytes they travel as exactly (what the
// followers pack is what rank 0 packs), the process's place in an MPI job, mpirun's arguments, and the config rules
// (actors.learner.ranks with every loss and with LoRA).
import { test } from "node:test";
import assert from "node:assert/strict";
import { decodePlan, encodePlan, type RankPlan } from "../../kernels/rank-group.js";
import { parseLossSpec } from "../../kernels/loss-spec.js";
import { OptimizerSchema } from "../../kernels/optimizer.js";
import { mpiJobPlace, mpirunArgs } from "../../actors/runtime/learner-ranks.js";
import { ConfigError, parseRunConfig } from "../../actors/runtime/config.js";

test("a train plan decodes to the very samples, loss and optimizer settings (Infinity included)", () => {
  const samples = [
    {
      promptIds: Int32Array.of(1, 2, 3),
      completionIds: Int32Array.of(4, 5),
      completionMask: Uint8Array.of(1, 0),
      samplerLogprobs: Float32Array.of(-0.1, -2.5),
      advantage: 0.75,
    },
    {
      promptIds: Int32Array.of(7),
      completionIds: Int32Array.of(8, 9, 10),
      completionMask: Uint8Array.of(1, 1, 1),
      samplerLogprobs: Float32Array.of(-1e-7, -3, -Math.PI),
      advantage: -1.25,
    },
  ];
  const opt = { ...OptimizerSchema.parse({ lr: 3e-4 }), maxGradNorm: Number.POSITIVE_INFINITY };
  const plan: RankPlan = {
    kind: "train",
    samples,
    loss: parseLossSpec({ name: "rl" }),
    opt,
    pack: { microBatchTokens: 64, sharePrefix: true },
    step: 17,
    threads: 2,
    blasRoutes: "nn:16x32x256:1t=blas",
  };
  const back = decodePlan(encodePlan(plan));
  assert.equal(back.kind, "train");
  if (back.kind !== "train") return;
  assert.deepEqual(back.loss, plan.loss);
  assert.deepEqual(back.opt, opt);
  assert.equal(back.opt.maxGradNorm, Number.POSITIVE_INFINITY);
  assert.deepEqual(back.pack, plan.pack);
  assert.equal(back.step, 17, "the followers key LoRA dropout's masks by rank 0's step");
  assert.equal(back.threads, 2);
  assert.equal(back.blasRoutes, "nn:16x32x256:1t=blas", "the followers compute with rank 0's sgemm routes");
  assert.equal(back.samples.length, 2);
  back.samples.forEach((s, i) => {
    assert.deepEqual(Array.from(s.promptIds), Array.from(samples[i]!.promptIds));
    assert.deepEqual(Array.from(s.completionIds), Array.from(samples[i]!.completionIds));
    assert.deepEqual(Array.from(s.completionMask), Array.from(samples[i]!.completionMask));
    assert.deepEqual(Array.from(s.samplerLogprobs), Array.from(samples[i]!.samplerLogprobs)); // f32 bits, unrounded
    assert.equal(s.advantage, samples[i]!.advantage);
  });
  // Positive control: a changed logprob does come through changed.
  const other = decodePlan(encodePlan({ ...plan, samples: [{ ...samples[0]!, samplerLogprobs: Float32Array.of(-0.1, -2.4) }, samples[1]!] }));
  assert.notDeepEqual(other.kind === "train" && Array.from(other.samples[0]!.samplerLogprobs), Array.from(samples[0]!.samplerLogprobs));
});

test("state and control plans round-trip", () => {
  const bytes = Uint8Array.from({ length: 1001 }, (_, i) => (i * 7) & 255);
  const s = decodePlan(encodePlan({ kind: "state", bytes }));
  assert.ok(s.kind === "state" && Buffer.from(s.bytes).equals(Buffer.from(bytes)));
  for (const kind of ["stop", "gather", "freshMoments"] as const) assert.deepEqual(decodePlan(encodePlan({ kind })), { kind });
  assert.deepEqual(decodePlan(encodePlan({ kind: "moments", step: 41 })), { kind: "moments", step: 41 });
});

test("the place in an MPI job comes from Open MPI's, PMI's or Slurm's environment; none outside one", () => {
  assert.equal(mpiJobPlace({}), null);
  assert.deepEqual(mpiJobPlace({ OMPI_COMM_WORLD_RANK: "1", OMPI_COMM_WORLD_SIZE: "4" }), { rank: 1, size: 4 });
  assert.deepEqual(mpiJobPlace({ PMI_RANK: "0", PMI_SIZE: "2" }), { rank: 0, size: 2 });
  assert.deepEqual(mpiJobPlace({ PMIX_RANK: "3", SLURM_NTASKS: "8" }), { rank: 3, size: 8 });
  const args = mpirunArgs(3, ["node", "x.js"], { RS_MPIRUN_ARGS: "--host a:3" });
  assert.deepEqual(args.slice(args.indexOf("-np"), args.indexOf("-np") + 2), ["-np", "3"]);
  assert.ok(args.includes("--oversubscribe") && args.join(" ").includes("--bind-to none"), "ranks share the machine unbound");
  assert.deepEqual(args.slice(-4), ["--host", "a:3", "node", "x.js"]);
});

test("actors.learner.ranks: 1 by default; more than one rank trains LoRA adapters and gspo", () => {
  const base = { run: "r", environments: [{ id: "arithmetic@^1" }] };
  assert.equal(parseRunConfig(base).actors.learner.ranks, 1);
  assert.equal(parseRunConfig({ ...base, actors: { learner: { ranks: 4 } } }).actors.learner.ranks, 4);
  const problems = (raw: object) => {
    try {
      parseRunConfig(raw);
      return [];
    } catch (e) {
      assert.ok(e instanceof ConfigError);
      return e.problems;
    }
  };
  const ranks2 = { ...base, actors: { learner: { ranks: 2 } } };
  assert.deepEqual(problems({ ...ranks2, rl: { loss: { name: "rl" } } }), []);
  assert.deepEqual(problems({ ...ranks2, model: { lora: { rank: 8 } } }), []);
  assert.deepEqual(problems({ ...ranks2, model: { lora: { rank: 8, dropout: 0.1 } }, rl: { loss: { name: "gspo" } } }), []);
  assert.deepEqual(problems({ ...ranks2, rl: { loss: { name: "gspo" } } }), []);
  // Positive control: the same check does report a problem with these sections.
  assert.match(problems({ ...ranks2, model: { lora: { rank: 0 } } }).join("\n"), /model\.lora\.rank/);
  assert.ok(problems({ ...base, actors: { learner: { ranks: 0 } } }).length > 0);
});
