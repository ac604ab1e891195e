// Kernel settings are arguments (rs_set_settings / rs_get_settings in kernels.h), not environment variables: they
// round-trip through the C ABI, take effect (each with a positive control that fails if the library ignored the
// field), are refused with the field named (and then nothing changes), and the knobs a user sets are read in one
// place in TypeScript (actors/runtime/kernel-settings.ts). The test hooks are a separate, test-only call.
import { test, type TestContext } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { readdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { backendInfo, kernels } from "../../kernels/index.js";
import { configureKernels, DEFAULT_KERNEL_SETTINGS, kernelSettings, packageRoot, resolveBackend, type KernelSettings } from "../../kernels/native.js";
import { kernelSettingsFromEnv } from "../../actors/runtime/kernel-settings.js";
import { randF32 } from "./helpers.js";

const cpu = () => resolveBackend("cpu").backend;
const haveBlas = backendInfo("cpu").blas.startsWith("openblas");

/** Puts the process's settings back after a test. */
function restoring(t: TestContext): void {
  const before = kernelSettings();
  t.after(() => configureKernels(before));
}

test("settings round-trip through the C ABI: what is set is what rs_get_settings returns, every field", (t) => {
  restoring(t);
  assert.deepEqual(cpu().settings(), kernelSettings(), "an opened backend got the process's settings");
  const all: KernelSettings = {
    blasMode: "on",
    blasLib: cpu().settings().blasLib, // fixed once BLAS was used (tested below)
    blasRoutes: "nt:64x64x512:1t=blas,tn:128x64x1024:2t=own",
    simd: "avx2",
    cudaMatmul: "tf32",
    cudaSync: true,
    cublasLib: "/opt/cuda/lib64/libcublas.so.12",
  };
  configureKernels(all);
  assert.deepEqual(cpu().settings(), all);
  assert.deepEqual(kernelSettings(), all);
  configureKernels({ simd: "best" });
  assert.deepEqual(cpu().settings(), { ...all, simd: "best" }, "a partial change keeps the other fields");
});

test("blasMode and simd take effect: the backend reports what was set", (t) => {
  restoring(t);
  configureKernels({ blasMode: "off" });
  assert.equal(backendInfo("cpu").blasMode, "off");
  assert.equal(backendInfo("cpu").blasRoutes, "off");
  configureKernels({ blasMode: "auto" });
  assert.equal(backendInfo("cpu").blasMode, "auto", "positive control: the mode follows the setting back");
  configureKernels({ simd: "avx2" });
  assert.equal(backendInfo("cpu").simd, "avx2+fma");
  configureKernels({ simd: "best" });
  const best = backendInfo("cpu").simd;
  if (best === "avx2+fma") t.diagnostic("no AVX-512 on this CPU: the simd setting cannot change the kernel here");
  else assert.equal(best, "avx2+fma+avx512f-sgemm", "positive control: the AVX-512 kernel comes back");
});

test("pinned routes are what the backend reports and what products follow; without the pin they are measured", {
  skip: haveBlas ? false : "OpenBLAS not installed",
}, (t) => {
  restoring(t);
  kernels.setThreads(1);
  t.after(() => kernels.setThreads(0));
  // K > 256: our kernel and OpenBLAS round differently, so the bits tell which one ran.
  const p = { transA: false, transB: true, M: 96, N: 80, K: 777 };
  const cls = kernels.gemmClass(p.transA, p.transB, p.M, p.N, p.K, 1);
  const run = (impl: "auto" | "own" | "blas") => {
    const C = new Float32Array(p.M * p.N);
    kernels.sgemm({ ...p, A: randF32(p.M * p.K, 1), B: randF32(p.K * p.N, 2), C, impl });
    return C;
  };
  const pins = `${cls}=blas,tn:128x64x1024:1t=own`;
  configureKernels({ blasMode: "auto", blasRoutes: pins });
  assert.equal(backendInfo("cpu").blasRoutes, pins, "the pinned table, before any product");
  assert.deepEqual(run("auto"), run("blas"), "the class runs where it was pinned");
  assert.equal(backendInfo("cpu").blasRoutes, pins, "and is not measured again");
  configureKernels({ blasRoutes: `${cls}=own` });
  assert.deepEqual(run("auto"), run("own"), "pinned the other way, the other kernel runs");
  // Positive control: with no pin the table starts empty and the class is measured (not left as pinned).
  configureKernels({ blasRoutes: "" });
  assert.equal(backendInfo("cpu").blasRoutes, "");
  run("auto");
  assert.match(backendInfo("cpu").blasDispatch ?? "", new RegExp(`measured: ${cls} \\(96x80x777 own`));
});

test("a bad setting is refused with the field named, and nothing changes", (t) => {
  restoring(t);
  configureKernels({ blasRoutes: "nn:64x64x64:1t=own" });
  const before = cpu().settings();
  assert.throws(() => configureKernels({ blasRoutes: "nt:2^26:1t=blas", simd: "avx2" }), /blas_routes: bad entry 'nt:2\^26:1t=blas'/);
  assert.deepEqual(cpu().settings(), before);
  assert.deepEqual(kernelSettings(), before);
  assert.throws(() => configureKernels({ blasMode: "sometimes" as KernelSettings["blasMode"] }), /blasMode must be one of "auto", "off", "on"/);
  assert.throws(() => cpu().setSettings({ ...before, cudaSync: 1 as unknown as boolean }), /cudaSync must be a boolean/);
  assert.deepEqual(cpu().settings(), before);
});

/** Runs `body` (JS, with the kernels as m, the native module as n) in a fresh process and returns what it printed. */
function fresh(body: string): string {
  const url = (f: string) => JSON.stringify(pathToFileURL(resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "kernels", f)).href);
  const code = `Promise.all([import(${url("index.js")}), import(${url("native.js")})]).then(([m, n]) => { ${body} })`;
  const r = spawnSync(process.execPath, ["-e", code], { encoding: "utf8", timeout: 60_000 });
  assert.equal(r.status, 0, r.stderr);
  return r.stdout.trim();
}

test("blasMode off before BLAS's first use: never loaded; blasLib is fixed once BLAS was used", { skip: haveBlas ? false : "OpenBLAS not installed" }, () => {
  const out = fresh(`n.configureKernels({ blasMode: "off" }); console.log(m.backendInfo("cpu").blas);
    n.configureKernels({ blasMode: "auto" }); console.log(m.backendInfo("cpu").blas);
    try { n.configureKernels({ blasLib: "/usr/lib/x86_64-linux-gnu/libm.so.6" }); console.log("accepted"); } catch (e) { console.log(e.message); }
    console.log(JSON.stringify(n.kernelSettings().blasLib));`).split("\n");
  assert.equal(out[0], "none (blas_mode off: never loaded)");
  assert.match(out[1]!, /^openblas \(/, "positive control: auto loads it at its first use");
  assert.match(out[2]!, /blas_lib cannot change after BLAS's first use/);
  assert.equal(out[3], '""', "refused: nothing changed");
});

test("the knobs a user sets are read in one place and become settings; a value a knob does not take is an error naming it", () => {
  assert.deepEqual(kernelSettingsFromEnv({}), DEFAULT_KERNEL_SETTINGS);
  assert.deepEqual(
    kernelSettingsFromEnv({
      ROLLSTREAM_BLAS: "off",
      ROLLSTREAM_BLAS_LIB: "/x/libopenblas.so.0",
      ROLLSTREAM_SIMD: "avx2",
      ROLLSTREAM_CUDA_MATMUL: "fp32",
      ROLLSTREAM_CUDA_SYNC: "1",
      ROLLSTREAM_CUBLAS: "/y/libcublas.so.12",
      ROLLSTREAM_BLAS_ROUTES: "nt:64x64x512:1t=blas", // not a knob: replay pins what a run recorded
    }),
    { blasMode: "off", blasLib: "/x/libopenblas.so.0", blasRoutes: "", simd: "avx2", cudaMatmul: "fp32", cudaSync: true, cublasLib: "/y/libcublas.so.12" },
  );
  assert.equal(kernelSettingsFromEnv({ ROLLSTREAM_BLAS: "on" }).blasMode, "on");
  assert.throws(() => kernelSettingsFromEnv({ ROLLSTREAM_BLAS: "maybe" }), /ROLLSTREAM_BLAS=maybe is not a value it takes: .*\bauto, off, on\b/);
  assert.throws(() => kernelSettingsFromEnv({ ROLLSTREAM_CUDA_MATMUL: "fp16" }), /ROLLSTREAM_CUDA_MATMUL=fp16/);
});

/** Source files (repo-relative) under `dirs`, with `ext`. */
function sources(dirs: string[], ext: RegExp): string[] {
  const root = packageRoot();
  const out: string[] = [];
  const walk = (d: string) => {
    for (const name of readdirSync(d)) {
      const p = join(d, name);
      if (statSync(p).isDirectory()) {
        if (name !== "node_modules" && name !== "build" && !name.startsWith("dist")) walk(p);
      } else if (ext.test(name)) out.push(relative(root, p));
    }
  };
  for (const d of dirs) walk(join(root, d));
  return out;
}
const text = (f: string) => readFileSync(join(packageRoot(), f), "utf8");

test("the libraries read no environment variable for a setting, and production code never sets the test hooks", () => {
  // Only OpenBLAS's own OPENBLAS_CORETYPE is read (to leave a user's choice alone), never a rollstream setting.
  const getenv = sources(["kernels/cpu", "kernels/cuda", "kernels/shared"], /\.(cpp|h|cu|cuh)$/).flatMap((f) =>
    [...text(f).matchAll(/getenv\("(\w+)"\)/g)].map((m) => `${f}: ${m[1]}`),
  );
  assert.deepEqual(getenv, ["kernels/cpu/blas_dispatch.cpp: OPENBLAS_CORETYPE"]);
  const tsKernels = sources(["kernels"], /\.ts$/).filter((f) => /process\.env/.test(text(f)));
  assert.deepEqual(tsKernels, [], "kernels/*.ts read no environment variable");
  const production = sources(["actors", "cli", "kernels", "rl", "streams", "environments", "bench", "deploy"], /\.ts$/).filter(
    (f) => f !== "kernels/testing.ts" && f !== "kernels/native.ts",
  );
  const hooked = production.filter((f) => /kernels\/testing\.js|setTestHooks\(|setKernelTestHooks\(/.test(text(f)));
  assert.deepEqual(hooked, [], "only tests reach the test hooks");
  // Positive control of the scan itself: the test helpers do reach them.
  assert.ok(/setKernelTestHooks\(/.test(text("test/helpers/kernel-test-hooks-preload.ts")));
});
