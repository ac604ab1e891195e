// Launching a test's ranks: mpirun -np N of a compiled rank script on loopback (TCP over lo), and why the MPI tests
// skip when they must (an addon built without MPI, no mpirun; CI installs openmpi).
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { nativeComm } from "../../kernels/native.js";
import { replayInProcess } from "../helpers/run-fixture.js";

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

export interface ReplayedStep {
  step: number;
  maxRelDiff: number | null;
  maxRelDiffFigure: string | null;
  absDiff: number | null;
  gradNorm: number;
  loss: number;
}

/**
 * Replays a ranks run's recorded steps in one process (from the oldest kept checkpoint, over the recorded rows) and
 * asserts every figure agrees within 1e-3 relative (1e-6 absolute near zero): ranks sum the gradient in another order,
 * so not bit for bit. Positive control: every compared step moved the weights. Returns the steps.
 */
export async function assertOneRankReplayAgrees(run: { configPath: string; nats: { url: string } }, steps: number): Promise<ReplayedStep[]> {
  const { code, lines: out, rows } = await replayInProcess({ config: run.configPath, steps: String(steps), nats: run.nats.url });
  // replay exits 1 when a step is not bit-exact: that is allowed here, within the tolerance.
  assert.ok(code === 0 || code === 1, out.join("\n"));
  assert.equal(rows.length, steps, out.join("\n"));
  const typed = rows as unknown as ReplayedStep[];
  assert.ok(
    typed.every((r) => r.gradNorm > 0 && r.loss !== 0),
    `positive control: every compared step moved the weights\n${out.join("\n")}`,
  );
  for (const r of typed)
    assert.ok(
      r.maxRelDiff !== null && (r.maxRelDiff <= 1e-3 || (r.absDiff ?? 1) <= 1e-6),
      `step ${r.step}: 1-rank replay differs by ${r.maxRelDiff} relative (${r.absDiff} absolute)\n${out.join("\n")}`,
    );
  return typed;
}
