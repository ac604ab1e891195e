// Shared by the kernel tests: seeded random data, float32 <-> float64 copies, closeness checks, and moving
// HF-named f64 reference weights into a PolicyModel's flat layout.
import assert from "node:assert/strict";
import type { PolicyModel } from "../../kernels/index.js";
import type { ModelConfig } from "../../kernels/model-config.js";
import type { Weights } from "../reference/llama-f64.js";
import { mulberry32 } from "../helpers/rng.js";
export { mulberry32 };

/** Uniform(-scale, scale) float32 values. */
export function randF32(n: number, seed: number, scale = 1): Float32Array {
  const r = mulberry32(seed);
  const a = new Float32Array(n);
  for (let i = 0; i < n; i++) a[i] = (r() * 2 - 1) * scale;
  return a;
}

export function randInts(n: number, seed: number, max: number): Int32Array {
  const r = mulberry32(seed);
  return Int32Array.from({ length: n }, () => Math.floor(r() * max));
}

export const f64 = (a: ArrayLike<number>): Float64Array => Float64Array.from(a as ArrayLike<number>);

/** sum(a * b). */
export function dot64(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let s = 0;
  for (let i = 0; i < a.length; i++) s += a[i] * b[i];
  return s;
}

/** Central differences of f at every index of x (f reads x). */
export function numericGrad(f: () => number, x: Float64Array, h = 1e-5, indices?: number[]): Float64Array {
  const idx = indices ?? Array.from({ length: x.length }, (_, i) => i);
  const g = new Float64Array(idx.length);
  idx.forEach((i, j) => {
    const o = x[i];
    x[i] = o + h;
    const fp = f();
    x[i] = o - h;
    const fm = f();
    x[i] = o;
    g[j] = (fp - fm) / (2 * h);
  });
  return g;
}

/**
 * Every |actual - expected| <= rtol * max|expected| + atol (scale-aware: fp32 kernels against f64 references),
 * and the relative L2 error below rtol. Reports the worst element.
 */
export function assertClose(actual: ArrayLike<number>, expected: ArrayLike<number>, what: string, rtol = 1e-4, atol = 1e-6): void {
  assert.equal(actual.length, expected.length, `${what}: length ${actual.length} vs ${expected.length}`);
  let scale = 0,
    num = 0,
    den = 0,
    worst = 0,
    worstAt = -1;
  for (let i = 0; i < expected.length; i++) scale = Math.max(scale, Math.abs(expected[i]));
  for (let i = 0; i < expected.length; i++) {
    const d = Math.abs(actual[i] - expected[i]);
    if (!(d <= worst) || Number.isNaN(d)) {
      worst = d;
      worstAt = i;
    }
    num += d * d;
    den += expected[i] * expected[i];
  }
  const rel = Math.sqrt(num) / Math.max(Math.sqrt(den), 1e-30);
  const ok = worst <= rtol * scale + atol && (rel <= rtol || Math.sqrt(num) <= atol * Math.sqrt(expected.length));
  assert.ok(
    ok,
    `${what}: worst |diff| ${worst.toExponential(3)} at ${worstAt} (actual ${actual[worstAt]}, expected ${expected[worstAt]}), ` +
      `max|expected| ${scale.toExponential(3)}, relative L2 error ${rel.toExponential(3)}, rtol ${rtol}`,
  );
}

/** Writes HF-named weights into a flat params array of the model's layout (rounded to f32). */
export function flatParams(model: PolicyModel, weights: Weights): Float32Array {
  const p = new Float32Array(model.numParams);
  for (const t of model.tensors()) {
    const w = weights.get(t.name);
    assert.ok(w, `reference weights lack ${t.name}`);
    assert.equal(w.length, t.size, `${t.name} size`);
    p.set(w, t.offset);
  }
  return p;
}

/** The f64 reference weights holding exactly the model's (f32) params. */
export function weightsOf(model: PolicyModel, params = model.getParams()): Weights {
  const w: Weights = new Map();
  for (const t of model.tensors()) w.set(t.name, f64(params.subarray(t.offset, t.offset + t.size)));
  return w;
}

export function tinyConfig(over: Partial<ModelConfig> = {}): ModelConfig {
  return {
    vocabSize: 37,
    hiddenSize: 16,
    intermediateSize: 24,
    numLayers: 2,
    numHeads: 4,
    numKvHeads: 2,
    rmsNormEps: 1e-5,
    ropeTheta: 10000,
    tieWordEmbeddings: true,
    maxPositionEmbeddings: 64,
    attentionBias: false,
    ...over,
  };
}
