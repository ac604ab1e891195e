// The sgemm dispatcher (kernels/cpu/gemm_router.h) routes each shape class to the kernel it measured faster, never
// to one it assumed: a positive control slows one kernel down (the test-only hook rs_test_hooks.slowdown_* runs it N
// times per timed run; 50x, more than a busy shared machine slows either kernel) and the routing flips; a BLAS that
// disagrees with our sgemm is never used; recorded routes pinned with the blasRoutes setting win over a fresh
// measurement (what replay relies on); and whatever the route, "auto" agrees with our sgemm on every class and gives
// the bits of the kernel its class was routed to.
import { test, type TestContext } from "node:test";
import assert from "node:assert/strict";
import { backendInfo, kernels, type GemmImpl } from "../../kernels/index.js";
import { configureKernels } from "../../kernels/native.js";
import { setKernelTestHooks, type KernelTestHooks } from "../../kernels/testing.js";
import { randF32 } from "./helpers.js";

const haveBlas = backendInfo("cpu").blas.startsWith("openblas");
const skip = haveBlas ? false : "OpenBLAS not installed";
/**
 * Sets the dispatcher's test hooks and pinned routes for one test (each call forgets measured routes) and puts both
 * back after. One kernel thread: on a busy shared machine a descheduled OpenMP or OpenBLAS thread can stall a
 * 2-thread product far more than any slowdown factor, and the positive controls must not depend on the neighbours.
 */
function withHooks(t: TestContext, hooks: KernelTestHooks, blasRoutes = ""): void {
  kernels.setThreads(1);
  configureKernels({ blasMode: "auto", blasRoutes });
  setKernelTestHooks(hooks);
  t.after(() => {
    kernels.setThreads(0);
    setKernelTestHooks({});
    configureKernels({ blasMode: "auto", blasRoutes: "" });
  });
}

interface Product {
  transA: boolean;
  transB: boolean;
  M: number;
  N: number;
  K: number;
}

// K > 256 so that our kernel (256-deep panels) and OpenBLAS round differently: the bits tell which one ran.
const P: Product = { transA: false, transB: true, M: 96, N: 80, K: 777 };
// One product per transpose combination and a spread of sizes (each its own class).
const CLASSES: Product[] = [
  { transA: false, transB: false, M: 40, N: 30, K: 300 },
  { transA: false, transB: true, M: 200, N: 130, K: 520 },
  { transA: true, transB: false, M: 128, N: 96, K: 1030 },
  { transA: true, transB: true, M: 61, N: 70, K: 300 },
  { transA: false, transB: true, M: 512, N: 384, K: 640 },
];

function run(p: Product, impl: GemmImpl, seed = 1): Float32Array {
  const A = randF32(p.M * p.K, seed),
    B = randF32(p.K * p.N, seed + 1),
    C = randF32(p.M * p.N, seed + 2);
  kernels.sgemm({ ...p, A, B, C, alpha: 0.9, beta: 0.5, impl });
  return C;
}

const routeOf = (p: Product): string | undefined => {
  const cls = kernels.gemmClass(p.transA, p.transB, p.M, p.N, p.K, backendInfo("cpu").threads);
  return new Map((backendInfo("cpu").blasRoutes ?? "").split(",").map((r) => r.split("=") as [string, string])).get(cls);
};

function maxRelDiff(a: Float32Array, b: Float32Array): number {
  let d = 0,
    s = 0;
  for (let i = 0; i < a.length; i++) {
    d = Math.max(d, Math.abs(a[i]! - b[i]!));
    s = Math.max(s, Math.abs(b[i]!));
  }
  return d / s;
}

test("routing follows measured speed: slow our sgemm down and the class goes to BLAS; slow BLAS down and it comes back", { skip }, (t) => {
  withHooks(t, { slowdownOwn: 50 });
  const own = run(P, "own"),
    blas = run(P, "blas");
  assert.notDeepEqual(own, blas, "the two kernels round differently at K=777, so the bits tell which one ran");
  assert.deepEqual(run(P, "auto"), blas, "own slowed 50x: auto runs BLAS");
  assert.equal(routeOf(P), "blas");
  assert.match(
    backendInfo("cpu").blasDispatch ?? "",
    /nt:64x64x512:1t \(96x80x777 own [\d.]+ ms, blas [\d.]+ ms, q3 [\d.]+ ms\) blas \d+\.\d\dx -> blas.*TEST HOOKS ACTIVE/,
  );

  setKernelTestHooks({ slowdownBlas: 50 }); // forgets the routes
  assert.deepEqual(run(P, "auto"), own, "BLAS slowed 50x: auto runs our sgemm");
  assert.equal(routeOf(P), "own");
  assert.match(backendInfo("cpu").blasDispatch ?? "", /\(96x80x777 own [\d.]+ ms, blas [\d.]+ ms, q3 [\d.]+ ms\) blas 0\.\d\dx -> own/);
});

test("the decision is made once per class: later products of the class follow it without measuring again", { skip }, (t) => {
  withHooks(t, { slowdownOwn: 50 });
  run(P, "auto");
  const routes = backendInfo("cpu").blasRoutes;
  // Same class (each dimension's bucket spans 2x), different shape.
  const Q = { ...P, M: P.M + 10 };
  assert.equal(kernels.gemmClass(Q.transA, Q.transB, Q.M, Q.N, Q.K, 1), kernels.gemmClass(P.transA, P.transB, P.M, P.N, P.K, 1));
  assert.deepEqual(run(Q, "auto"), run(Q, "blas"));
  assert.equal(backendInfo("cpu").blasRoutes, routes);
});

test("a BLAS that disagrees with our sgemm is never used, and the log says why", { skip }, (t) => {
  withHooks(t, { corruptBlas: true, slowdownOwn: 50 });
  assert.deepEqual(run(P, "auto"), run(P, "own"), "even with our sgemm slowed down");
  const info = backendInfo("cpu");
  assert.match(info.blasDispatch ?? "", /BLAS disagrees with our sgemm on nt:64x64x512:1t \(max relative difference \d\.\de[-+]\d+ > 1e-03\): never used/);
  const other = CLASSES[2]!;
  assert.deepEqual(run(other, "auto"), run(other, "own"), "nor on a class met afterwards");
  assert.ok(!/=blas/.test(backendInfo("cpu").blasRoutes ?? ""), backendInfo("cpu").blasRoutes);
});

test("pinned routes win over measurement (replay), and unlisted classes are still measured", { skip }, (t) => {
  const cls = kernels.gemmClass(P.transA, P.transB, P.M, P.N, P.K, 1); // withHooks runs one thread
  withHooks(t, { slowdownBlas: 50 }, `${cls}=blas`);
  assert.deepEqual(run(P, "auto"), run(P, "blas"), "pinned to BLAS although BLAS would measure 50x slower");
  assert.match(backendInfo("cpu").blasDispatch ?? "", new RegExp(`pinned: ${cls.replace("^", "\\^")} -> blas`));
  const other = CLASSES[2]!;
  run(other, "auto");
  assert.match(
    backendInfo("cpu").blasDispatch ?? "",
    /measured: tn:128x64x1024:1t \(128x96x1030 own [\d.]+ ms, blas [\d.]+ ms, q3 [\d.]+ ms\) blas/,
    "an unlisted class is measured",
  );

  // A malformed table is refused with the entry named, and nothing changes (the pin and the measurement stand).
  const before = backendInfo("cpu").blasRoutes;
  assert.throws(() => configureKernels({ blasRoutes: "nt:2^26:1t=blas" }), /blas_routes: bad entry 'nt:2\^26:1t=blas'/);
  assert.equal(backendInfo("cpu").blasRoutes, before);
});

test("auto agrees with our sgemm on every class, whichever way each class is routed", { skip }, (t) => {
  withHooks(t, {});
  for (const slow of ["own:50", "blas:50", ""]) {
    setKernelTestHooks(slow === "own:50" ? { slowdownOwn: 50 } : slow === "blas:50" ? { slowdownBlas: 50 } : {});
    CLASSES.forEach((p, i) => {
      const got = run(p, "auto", 10 * i),
        own = run(p, "own", 10 * i);
      const name = `${slow || "unhooked"} ${kernels.gemmClass(p.transA, p.transB, p.M, p.N, p.K, 1)} ${p.M}x${p.N}x${p.K}`;
      assert.ok(maxRelDiff(got, own) < 1e-5, `${name}: ${maxRelDiff(got, own)}`);
      if (slow === "own:50") assert.equal(routeOf(p), "blas", name);
      if (slow === "blas:50") assert.equal(routeOf(p), "own", name);
    });
    t.diagnostic(`${slow || "unhooked"}: ${backendInfo("cpu").blasDispatch}`);
  }
});

test("modes: off routes nothing to BLAS, on routes every product of at least 2^19 multiply-adds unmeasured", { skip }, (t) => {
  withHooks(t, { slowdownBlas: 50 });
  const big = CLASSES[4]!;
  assert.equal(kernels.setBlasMode("on"), true);
  assert.equal(backendInfo("cpu").blasRoutes, "on");
  assert.equal(backendInfo("cpu").blasMode, "on");
  assert.deepEqual(run(big, "auto"), run(big, "blas"));
  assert.deepEqual(run(CLASSES[0]!, "auto"), run(CLASSES[0]!, "own"), "40x30x300 is under 2^19");
  assert.equal(kernels.setBlasMode("off"), false);
  assert.equal(backendInfo("cpu").blasRoutes, "off");
  assert.equal(backendInfo("cpu").blas, "none (disabled)");
  assert.deepEqual(run(big, "auto"), run(big, "own"));
});

test("tiny products always run on our sgemm and are never measured", { skip }, (t) => {
  withHooks(t, { slowdownOwn: 50 });
  const tiny = { transA: false, transB: false, M: 16, N: 16, K: 64 };
  assert.equal(kernels.gemmClass(tiny.transA, tiny.transB, tiny.M, tiny.N, tiny.K, 1), "");
  assert.deepEqual(run(tiny, "auto"), run(tiny, "own"));
  assert.equal(backendInfo("cpu").blasRoutes, "");
});

test("gemmClass names the classes exactly as the native dispatcher does", { skip }, (t) => {
  withHooks(t, {});
  const threads = backendInfo("cpu").threads;
  const names = CLASSES.map((p) => {
    run(p, "auto");
    return kernels.gemmClass(p.transA, p.transB, p.M, p.N, p.K, threads);
  });
  const native = (backendInfo("cpu").blasRoutes ?? "").split(",").map((r) => r.split("=")[0]);
  assert.deepEqual([...new Set(names)].sort(), [...native].sort());
  assert.equal(kernels.gemmClass(false, true, 2048, 256, 128, 2), "nt:2048x256x128:2t");
  assert.equal(kernels.gemmClass(true, false, 300, 128, 2047, 1), "tn:256x128x1024:1t");
  assert.equal(kernels.gemmClass(false, false, 16, 16, 64, 1), "", "under 2^15 multiply-adds");
});
