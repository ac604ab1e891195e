// The learner ranks' choice between MPI and NCCL (kernels/rank-collectives.ts): every rank must take the same path,
// so a group whose ranks differ is refused with the reason. (The NCCL path itself runs in kernels/gpu-check/nccl_check.py.)
import { test } from "node:test";
import assert from "node:assert/strict";
import { resolveBackend } from "../../kernels/native.js";
import { agreedPath } from "../../kernels/rank-collectives.js";

test("ranks agree on MPI or NCCL from their votes, and a mixed group is refused naming what differs", () => {
  assert.equal(agreedPath(0, 0, 2, "none (the cpu backend uses MPI)"), "mpi");
  assert.equal(agreedPath(2, 0, 2, "none (cannot load NCCL)"), "mpi", "GPUs without NCCL: MPI on host copies");
  assert.equal(agreedPath(4, 4, 4, "nccl 22703"), "nccl");
  assert.throws(() => agreedPath(1, 0, 2, "x"), /1 of 2 ranks run on a GPU and the others on the CPU/);
  assert.throws(() => agreedPath(2, 1, 2, "none (cannot load NCCL)"), /NCCL was found by 1 of 2 ranks \(this one: none \(cannot load NCCL\)\)/);
});

test("the CPU backend has no NCCL path and says so; its NCCL calls refuse with the reason", () => {
  const cpu = resolveBackend("cpu").backend;
  assert.deepEqual(cpu.nccl(), { available: false, describe: "none (this backend has no NCCL path)" });
  assert.throws(() => cpu.ncclUniqueId(), /this backend has no NCCL path \(the CUDA backend has\)/);
  assert.throws(() => cpu.ncclInit(1, new Uint8Array(128), 0, 0), /no NCCL path/);
});
