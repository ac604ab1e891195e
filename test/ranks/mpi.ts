// Launching a test's ranks: mpirun -np N of a compiled rank script on loopback (TCP over lo), and why the MPI tests
// skip when they must (an addon built without MPI, no mpirun; CI installs openmpi).
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { nativeComm } from "../../kernels/native.js";

const haveMpirun = spawnSync("mpirun", ["--version"]).status === 0;
export const mpiSkip: string | false = !nativeComm().available
  ? "the kernels addon was built without MPI (no mpicc at build time)"
  : !haveMpirun
    ? "mpirun is not installed"
    : false;

/** Runs `np` ranks of `script` with `args`; fails the test, with their output, when the job fails. */
export function mpirun(script: string, np: number, args: string[]): void {
  const r = spawnSync(
    "mpirun",
    [
      "--allow-run-as-root",
      "--oversubscribe",
      "--mca",
      "btl",
      "self,tcp",
      "--mca",
      "btl_tcp_if_include",
      "lo",
      "-np",
      String(np),
      process.execPath,
      script,
      ...args,
    ],
    { encoding: "utf8", timeout: 120_000, env: { ...process.env, OMPI_MCA_plm_rsh_agent: "" } },
  );
  assert.equal(r.status, 0, `mpirun -np ${np} failed:\n${r.stdout}\n${r.stderr}`);
}

/** A Float32Array a rank wrote with writeFileSync. */
export const readF32 = (dir: string, name: string) => new Float32Array(new Uint8Array(readFileSync(join(dir, name))).buffer);
