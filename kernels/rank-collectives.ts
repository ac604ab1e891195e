// How a learner rank's ZeRO-1 step sums the gradient and shares the parameters (kernels/zero1.ts):
// - "nccl": on the CUDA backend with libnccl, NCCL on the model's device buffers (no host copies). Its communicator
//   id comes from rank 0 over the ranks' MPI communicator, which they already share for the step plans (the issue
//   suggested the run's KV; MPI needs no shared filesystem either, and followers need no NATS connection).
// - "mpi": everywhere else, MPI on the model's host buffers (the CUDA backend then copies them to and from the GPU).
// Every rank must take the same path or the group would wait forever in different collectives: the ranks agree by
// an all-reduce first, and a group whose ranks differ (some on a GPU, some not; NCCL found on some) is refused.
import { resolveBackend, type NativeComm } from "./native.js";
import type { PolicyModel } from "./policy-model.js";

export interface RankCollectives {
  readonly kind: "mpi" | "nccl";
  /** The sum over ranks of this rank's slice of the gradient, in place; the slice's sum of squares. */
  reduceScatterGrads(counts: number[]): number;
  /** Every rank's slice of the parameters, in place. */
  allGatherParams(counts: number[]): void;
  /** Why this path (NCCL's version and library, or why not NCCL). */
  readonly describe: string;
}

/** What this rank can do: its device and whether its backend found NCCL. */
function localAbility(model: PolicyModel): { cuda: boolean; nccl: { available: boolean; describe: string } } {
  if (model.device !== "cuda") return { cuda: false, nccl: { available: false, describe: `none (the ${model.device} backend uses MPI)` } };
  return { cuda: true, nccl: resolveBackend("cuda").backend.nccl() };
}

/** The path all `size` ranks take, from how many run on a GPU and how many found NCCL; throws when they differ. */
export function agreedPath(onGpu: number, withNccl: number, size: number, mine: string): "mpi" | "nccl" {
  if (onGpu !== 0 && onGpu !== size) throw new Error(`learner ranks: ${onGpu} of ${size} ranks run on a GPU and the others on the CPU; give every rank a GPU`);
  if (withNccl === 0) return "mpi";
  if (withNccl !== size) throw new Error(`learner ranks: NCCL was found by ${withNccl} of ${size} ranks (this one: ${mine}); install it on every node`);
  return "nccl";
}

/** The ranks' common choice (a collective: every rank calls it once, in the same order). */
export function chooseCollectives(model: PolicyModel, comm: NativeComm, rank: number, size: number): RankCollectives {
  const me = localAbility(model);
  const votes = new Float64Array([me.cuda ? 1 : 0, me.nccl.available ? 1 : 0]);
  comm.allReduceSum(votes);
  const mpi: RankCollectives = {
    kind: "mpi",
    describe: me.nccl.describe,
    reduceScatterGrads: (counts) => model.reduceScatterGrads(counts),
    allGatherParams: (counts) => model.allGatherParams(counts),
  };
  if (agreedPath(votes[0]!, votes[1]!, size, me.nccl.describe) === "mpi") return mpi;
  const backend = resolveBackend("cuda").backend;
  const id = rank === 0 ? backend.ncclUniqueId() : new Uint8Array(128);
  comm.bcast(id, 0);
  // Each rank sees its own GPU as device 0 (learner-ranks.ts pins CUDA_VISIBLE_DEVICES to the local rank).
  const handle = backend.ncclInit(size, id, rank, 0);
  return {
    kind: "nccl",
    describe: me.nccl.describe,
    reduceScatterGrads: (counts) => model.ncclReduceScatterGrads(handle, counts, rank),
    allGatherParams: (counts) => model.ncclAllGatherParams(handle, counts),
  };
}
