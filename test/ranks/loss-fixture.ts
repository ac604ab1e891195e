// The cases the learner-ranks loss tests train (test/ranks/loss-mpi.test.ts, on 1 rank in the test and on 2 in
// test/ranks/loss-rank.ts): the ZeRO-1 tests' global batch under rl.loss gspo and/or model.lora, set up the same way
// in every process, so 1 rank and 2 start from the same bits.
import { PolicyModel } from "../../kernels/index.js";
import { LoraAdapters, LoraSchema, loraTargets } from "../../kernels/lora.js";
import { parseLossSpec } from "../../kernels/loss-spec.js";
import { OptimizerSchema } from "../../kernels/optimizer.js";
import type { TrainSample } from "../../kernels/packing.js";
import { packSamples } from "../../kernels/packing.js";
import { randF32 } from "../kernels/helpers.js";
import { fixture } from "./zero1-fixture.js";

export interface LossCase {
  loss: "rl" | "gspo";
  /** model.lora with this dropout; absent: every weight trains. */
  lora?: { dropout: number };
  /** Added to sample 1's advantage (the tests' positive control: another batch trains other weights; that sample's
   * sequence trains in every case, where some others clip under GSPO). */
  perturb?: number;
}

export function setupCase(c: LossCase) {
  const f = fixture();
  const samples: TrainSample[] = f.samples.map((s, i) => (i === 1 ? { ...s, advantage: s.advantage + (c.perturb ?? 0) } : s));
  const packed = packSamples(samples, f.pack.microBatchTokens, f.cfg.maxPositionEmbeddings, { sharePrefix: f.pack.sharePrefix });
  // GSPO's clip range wide enough that some of the fixture's sequences clip and some train (the test checks both).
  const loss = c.loss === "gspo" ? parseLossSpec({ name: "gspo", clipEps: 0.05, clipEpsHigh: 0.05 }) : f.spec;
  // The fixture's lr moves the whole model so far in a step that every GSPO sequence clips after it: a tenth of it.
  const opt = OptimizerSchema.parse(c.loss === "gspo" && !c.lora ? { ...f.opt, lr: f.opt.lr / 10 } : f.opt);
  const model = PolicyModel.create(f.cfg, { seed: f.seed, threads: 1 });
  const initial = model.getParams();
  let lora: LoraAdapters | null = null;
  if (c.lora) {
    const s = LoraSchema.parse({ rank: 2, alpha: 4, dropout: c.lora.dropout, seed: 5, targetModules: ["all-linear"] });
    lora = new LoraAdapters(s, loraTargets(model.tensors(), s), initial);
    // B starts at zero (PEFT's init), where A gets no gradient and dropout changes nothing; give it values.
    for (const t of lora.targets) lora.params.set(randF32(t.out * s.rank, 40 + t.b, 0.3), t.b);
    lora.load(model);
  }
  return { f, samples, packed, loss, opt, model, lora, initial };
}
