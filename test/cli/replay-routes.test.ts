// What `replay` says about a run's sgemm routes: a count in one short line (a measured table runs to 1,500
// characters and used to be printed whole, twice), the whole table kept for --verbose and --json (BackendPlan.routes).
import { test } from "node:test";
import assert from "node:assert/strict";
import { backendInfo, configureKernels, kernelSettings } from "../../kernels/index.js";
import { describeBackend, matchBackend, routesDiffering, summariseRoutes, type RecordedBackend } from "../../cli/replay/backend.js";

/** A measured table of 48 shape classes, 36 routed to BLAS: as long as a real learner's. */
function routes(): string {
  const out: string[] = [];
  for (const t of ["nn", "nt", "tn"])
    for (const m of [64, 128, 256, 512]) for (const k of [128, 1024, 2048, 4096]) out.push(`${t}:${m}x256x${k}:2t=${k === 128 ? "own" : "blas"}`);
  return out.join(",");
}

test("the route table is counted, not printed: how many classes, how many to BLAS, how many differ", () => {
  const table = routes();
  assert.ok(table.length > 1000, "the table is long (the control for the length checks)");
  assert.equal(summariseRoutes(table), "48 shape classes, 36 to BLAS");
  assert.equal(summariseRoutes("nt:64x64x512:1t=blas"), "1 shape class, 1 to BLAS");
  assert.equal(routesDiffering(table, table), 0);
  assert.equal(routesDiffering("nt:64x64x512:1t=blas,tn:128x64x1024:2t=own", "nt:64x64x512:1t=own"), 2);
  const recorded = {
    device: "cpu",
    blas: "openblas x",
    blasDispatch: true,
    blasRoutes: table,
    simd: "avx2",
    threads: 2,
    step: 1,
  } as unknown as RecordedBackend;
  const line = describeBackend(recorded);
  assert.ok(line.length < 200, line);
  assert.match(line, /sgemm dispatched to openblas x by measured routes \(48 shape classes, 36 to BLAS\)/);
});

const here = backendInfo("cpu");
test("a replay that pins the run's routes says so in one short line and keeps the table for --verbose", {
  skip: here.blas.startsWith("none") ? "OpenBLAS is not installed" : false,
}, () => {
  const before = kernelSettings();
  configureKernels({ blasMode: "auto" });
  const table = routes();
  const recorded = {
    device: "cpu",
    blas: here.blas,
    blasDispatch: true,
    blasRoutes: table,
    simd: here.simd,
    threads: 1,
    step: 1,
  } as unknown as RecordedBackend;
  const plan = matchBackend(recorded, { device: "cpu", threads: 1 });
  try {
    assert.equal(plan.matched, true, plan.lines.join("\n"));
    assert.equal(plan.routes, table);
    assert.match(plan.lines.join("\n"), /routes pinned as recorded \(48 shape classes, 36 to BLAS; none differ here\)/);
    for (const l of plan.lines) assert.ok(l.length < 400, l);
    assert.ok(!plan.lines.join("\n").includes("nn:64x256x128"), "no route is printed by default");
  } finally {
    plan.restore();
    configureKernels(before);
  }
});
