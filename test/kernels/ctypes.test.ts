// The backend library is plain C: Python's ctypes can load and drive it (how the CUDA build gets checked
// against PyTorch on a GPU machine).
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { join } from "node:path";
import { backendInfo } from "../../kernels/index.js";
import { packageRoot } from "../../kernels/native.js";

const python = spawnSync("python3", ["--version"]).status === 0;

test("librollstream_cpu.so works from Python ctypes", { skip: python ? false : "python3 not installed" }, () => {
  const script = join(packageRoot(), "test", "kernels", "ctypes_smoke.py");
  const r = spawnSync("python3", [script, backendInfo("cpu").path], { encoding: "utf8", timeout: 60_000 });
  assert.equal(r.status, 0, `ctypes smoke failed:\n${r.stdout}\n${r.stderr}`);
  assert.match(r.stdout, /ctypes ok: \{"device":"cpu"/);
});
