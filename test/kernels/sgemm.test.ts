// Our packed AVX2 sgemm and the OpenBLAS dispatch against a float64 product, for every transpose combination,
// edge sizes around the 6x16 micro-tile and the 256-deep K panels, alpha/beta and leading dimensions.
import { test } from "node:test";
import assert from "node:assert/strict";
import { backendInfo, kernels } from "../../kernels/index.js";
import { assertClose, randF32 } from "./helpers.js";

function naive(
  ta: boolean,
  tb: boolean,
  M: number,
  N: number,
  K: number,
  alpha: number,
  A: Float32Array,
  lda: number,
  B: Float32Array,
  ldb: number,
  beta: number,
  C0: Float32Array,
  ldc: number,
) {
  const C = Float64Array.from(C0);
  for (let i = 0; i < M; i++)
    for (let j = 0; j < N; j++) {
      let s = 0;
      for (let k = 0; k < K; k++) s += (ta ? A[k * lda + i] : A[i * lda + k]) * (tb ? B[j * ldb + k] : B[k * ldb + j]);
      C[i * ldc + j] = alpha * s + beta * C0[i * ldc + j];
    }
  return C;
}

const SHAPES: Array<[number, number, number]> = [
  [1, 1, 1],
  [6, 16, 8],
  [7, 17, 9],
  [13, 33, 257],
  [61, 5, 300],
  [100, 130, 520],
  [12, 64, 40],
];
const blas = backendInfo("cpu").blas.startsWith("openblas");

for (const impl of ["own", "own-avx2", "blas", "auto"] as const) {
  test(`sgemm impl=${impl}: all transposes, edge tiles, alpha/beta, padded leading dimensions`, {
    skip: impl === "blas" && !blas ? "OpenBLAS not installed" : false,
  }, (t) => {
    const avx512 = kernels.setAvx512(impl !== "own-avx2");
    t.after(() => kernels.setAvx512(true));
    if (impl === "own") t.diagnostic(`own kernel: ${avx512 ? "AVX-512" : "AVX2"}`);
    let seed = 1;
    for (const [M, N, K] of SHAPES)
      for (const ta of [false, true])
        for (const tb of [false, true]) {
          const lda = (ta ? M : K) + 3,
            ldb = (tb ? K : N) + 1,
            ldc = N + 2;
          const A = randF32((ta ? K : M) * lda, seed++),
            B = randF32((tb ? N : K) * ldb, seed++),
            C = randF32(M * ldc, seed++);
          const want = naive(ta, tb, M, N, K, 0.7, A, lda, B, ldb, 0.3, C, ldc);
          kernels.sgemm({ transA: ta, transB: tb, M, N, K, alpha: 0.7, A, lda, B, ldb, beta: 0.3, C, ldc, impl: impl === "own-avx2" ? "own" : impl });
          assertClose(C, want, `${impl} M=${M} N=${N} K=${K} ta=${ta} tb=${tb}`, 1e-5, 1e-6);
        }
  });
}

test("sgemm: beta 0 ignores NaN garbage in C; K = 0 scales C by beta", () => {
  const A = randF32(4 * 3, 1),
    B = randF32(3 * 5, 2);
  const C = new Float32Array(4 * 5).fill(NaN);
  kernels.sgemm({ M: 4, N: 5, K: 3, A, B, C, impl: "own" });
  assert.ok(C.every(Number.isFinite));
  const C2 = new Float32Array(6).fill(2);
  kernels.sgemm({ M: 2, N: 3, K: 0, A: new Float32Array(0), B: new Float32Array(0), C: C2, beta: 0.5, lda: 1, ldb: 3, impl: "own" });
  assert.deepEqual([...C2], [1, 1, 1, 1, 1, 1]);
});

test("sgemm: the AVX-512 and AVX2 micro-kernels give bit-identical results", {
  skip: kernels.setAvx512(true) ? false : "AVX-512 unavailable",
}, () => {
  let seed = 100;
  try {
    for (const [M, N, K] of SHAPES)
      for (const ta of [false, true])
        for (const tb of [false, true]) {
          const A = randF32(M * K, seed++),
            B = randF32(K * N, seed++),
            C0 = randF32(M * N, seed++);
          const args = { transA: ta, transB: tb, M, N, K, alpha: 0.7, beta: 0.3, A, B, impl: "own" as const };
          const wide = Float32Array.from(C0);
          kernels.setAvx512(true);
          kernels.sgemm({ ...args, C: wide });
          const narrow = Float32Array.from(C0);
          kernels.setAvx512(false);
          kernels.sgemm({ ...args, C: narrow });
          assert.deepEqual(wide, narrow, `M=${M} N=${N} K=${K} ta=${ta} tb=${tb}`);
        }
  } finally {
    kernels.setAvx512(true);
  }
});

test("sgemm: our kernel's rows do not depend on the other rows (row-independence used by generation)", () => {
  const K = 300,
    N = 70;
  const A = randF32(50 * K, 3),
    B = randF32(N * K, 4);
  const full = new Float32Array(50 * N);
  kernels.sgemm({ transB: true, M: 50, N, K, A, B, C: full, impl: "own" });
  const part = new Float32Array(3 * N);
  kernels.sgemm({ transB: true, M: 3, N, K, A: A.subarray(20 * K, 23 * K), B, C: part, impl: "own" });
  assert.deepEqual(part, full.subarray(20 * N, 23 * N));
});

test("sgemm: too-short arrays and bad leading dimensions throw instead of reading out of bounds", () => {
  assert.throws(
    () => kernels.sgemm({ M: 4, N: 4, K: 4, A: new Float32Array(15), B: new Float32Array(16), C: new Float32Array(16) }),
    /A has 15 elements, needs 16/,
  );
  assert.throws(
    () => kernels.sgemm({ M: 4, N: 4, K: 4, A: new Float32Array(16), B: new Float32Array(16), C: new Float32Array(16), lda: 2 }),
    /leading dimension/,
  );
  assert.throws(
    () => kernels.sgemm({ M: 2, N: 2, K: 2, A: new Float64Array(4) as unknown as Float32Array, B: new Float32Array(4), C: new Float32Array(4) }),
    /A must be a Float32Array/,
  );
});
