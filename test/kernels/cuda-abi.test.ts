// The CUDA backend cannot run here (no GPU), but two things can be checked on any machine: its ctypes
// bindings match kernels.h exactly, and on a machine without a GPU it loads and refuses cleanly.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
const haveNumpy = spawnSync("python3", ["-c", "import numpy"]).status === 0;
const cudaLib = join(root, "kernels", "build", "Release", "librollstream_cuda.so");

test("ctypes bindings of the GPU check scripts match kernels.h (signatures, structs, enums)", {
  skip: haveNumpy ? false : "python3 with numpy not found",
}, () => {
  const r = spawnSync("python3", [join(root, "kernels", "gpu-check", "test_abi_signatures.py")], { cwd: root, encoding: "utf8", timeout: 120_000 });
  assert.equal(r.status, 0, r.stdout + r.stderr);
});

test("the CUDA library loads without a GPU and every entry point refuses cleanly", {
  skip: !haveNumpy ? "python3 with numpy not found" : !existsSync(cudaLib) ? "CUDA backend not built (no nvcc)" : false,
}, () => {
  const r = spawnSync("python3", [join(root, "kernels", "gpu-check", "test_no_device.py")], { cwd: root, encoding: "utf8", timeout: 120_000 });
  assert.equal(r.status, 0, r.stdout + r.stderr);
});

test("the engine check script (run on a GPU by the device session) passes on the CPU library", {
  skip: haveNumpy ? false : "python3 with numpy not found",
}, () => {
  const cpuLib = join(root, "kernels", "build", "Release", "librollstream_cpu.so");
  const r = spawnSync("python3", [join(root, "kernels", "gpu-check", "engine_check.py"), cpuLib], { cwd: root, encoding: "utf8", timeout: 120_000 });
  assert.equal(r.status, 0, r.stdout + r.stderr);
});
