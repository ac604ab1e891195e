// Which OPENBLAS_CORETYPE the CPU backend forces, as a pure function of the core OpenBLAS detected, the CPU's widest
// vector unit, a user's own setting and whether the build can switch cores (kernels/cpu/blas_coretype.h, compiled here
// with a small driver); then, end to end in a fresh process, the reload that applies it.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { backendInfo } from "../../kernels/index.js";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
const haveCxx = spawnSync("g++", ["--version"]).status === 0;
const haveBlas = backendInfo("cpu").blas.startsWith("openblas");

// SimdLevel in blas_coretype.h.
const SSE = 0,
  AVX = 1,
  AVX2 = 2,
  AVX512 = 3;

const CASES: Array<{ detected: string; cpu: number; user?: string; dynamic?: boolean; force: string; why: RegExp }> = [
  // The trap: OpenBLAS 0.3.21 does not know the CPU and falls back to its SSE3 kernels.
  { detected: "Prescott", cpu: AVX512, force: "SkylakeX", why: /core Prescott uses SSE, the CPU has AVX-512/ },
  { detected: "Prescott", cpu: AVX2, force: "Haswell", why: /the CPU has AVX2/ },
  { detected: "Prescott", cpu: AVX, force: "Sandybridge", why: /the CPU has AVX$/ },
  { detected: "Haswell", cpu: AVX512, force: "SkylakeX", why: /core Haswell uses AVX2, the CPU has AVX-512/ },
  { detected: "Sandybridge", cpu: AVX2, force: "Haswell", why: /uses AVX, the CPU has AVX2/ },
  // Right already: nothing to do, nothing to say.
  { detected: "SkylakeX", cpu: AVX512, force: "", why: /^$/ },
  { detected: "Cooperlake", cpu: AVX512, force: "", why: /^$/ },
  { detected: "Zen", cpu: AVX2, force: "", why: /^$/ },
  { detected: "Prescott", cpu: SSE, force: "", why: /^$/ },
  // A user's OPENBLAS_CORETYPE is theirs, even a slow one.
  { detected: "Prescott", cpu: AVX512, user: "Prescott", force: "", why: /OPENBLAS_CORETYPE=Prescott set by the user/ },
  // A fixed-target build cannot switch (its names are upper case).
  { detected: "PRESCOTT", cpu: AVX512, dynamic: false, force: "", why: /not a DYNAMIC_ARCH build: cannot switch/ },
  { detected: "HASWELL", cpu: AVX2, dynamic: false, force: "", why: /^$/ },
  // Names we do not know are left alone (the measurement still decides whether to use the library).
  { detected: "NeoverseN1", cpu: AVX512, force: "", why: /not known to rollstream/ },
];

test("choose_coretype: the core OpenBLAS detected vs the CPU's vector units, sample inputs", { skip: haveCxx ? false : "g++ not found" }, (t) => {
  const dir = mkdtempSync(join(tmpdir(), "rs-coretype-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const exe = join(dir, "driver");
  const cc = spawnSync("g++", ["-std=c++17", "-I", join(root, "kernels"), join(root, "test", "kernels", "blas_coretype_driver.cpp"), "-o", exe], {
    encoding: "utf8",
  });
  assert.equal(cc.status, 0, cc.stderr);
  const input = CASES.map((c) => `${c.detected}|${c.cpu}|${c.user ?? ""}|${c.dynamic === false ? 0 : 1}`).join("\n") + "\n";
  const r = spawnSync(exe, [], { input, encoding: "utf8" });
  assert.equal(r.status, 0, r.stderr);
  const out = r.stdout.trimEnd().split("\n");
  assert.equal(out.length, CASES.length);
  CASES.forEach((c, i) => {
    const [force, why] = out[i]!.split("|");
    const name = `${c.detected} on a ${["SSE", "AVX", "AVX2", "AVX-512"][c.cpu]} CPU${c.user ? ` (user: ${c.user})` : ""}`;
    assert.equal(force, c.force, name);
    assert.match(why ?? "", c.why, name);
  });
});

interface Fresh {
  /** The test-only hook: OpenBLAS's first load pretends it detected this core. */
  detectedCore?: string;
  /** The blasLib setting. */
  blasLib?: string;
  /** OPENBLAS_CORETYPE, OpenBLAS's own variable (a user's choice); unset when not given. */
  coretype?: string;
}

/** backendInfo().blas of a fresh process (the library is loaded once per process), set up as asked before BLAS's first use. */
function blasInFreshProcess(o: Fresh, checkSgemm = true): string {
  const url = (f: string) => JSON.stringify(pathToFileURL(resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "kernels", f)).href);
  const check = `const k = m.kernels; const A = new Float32Array(64 * 64).fill(0.5);
    const C1 = new Float32Array(64 * 64), C2 = new Float32Array(64 * 64);
    k.sgemm({ M: 64, N: 64, K: 64, A, B: A, C: C1, impl: "own" }); k.sgemm({ M: 64, N: 64, K: 64, A, B: A, C: C2, impl: "blas" });
    if (C1.some((v, i) => Math.abs(v - C2[i]) > 1e-4)) throw new Error("BLAS result differs");`;
  const code = `Promise.all([import(${url("index.js")}), import(${url("native.js")}), import(${url("testing.js")})]).then(([m, n, t]) => {
    n.configureKernels({ blasLib: ${JSON.stringify(o.blasLib ?? "")} });
    t.setKernelTestHooks({ blasDetectedCore: ${JSON.stringify(o.detectedCore ?? "")} });
    ${checkSgemm ? check : ""}
    console.log(m.backendInfo("cpu").blas); })`;
  const env: NodeJS.ProcessEnv = { ...process.env };
  delete env["OPENBLAS_CORETYPE"];
  if (o.coretype) env["OPENBLAS_CORETYPE"] = o.coretype;
  const r = spawnSync(process.execPath, ["-e", code], { env, encoding: "utf8", timeout: 60_000 });
  assert.equal(r.status, 0, r.stderr);
  return r.stdout.trim();
}

test("a core without the CPU's vector units is replaced before use: OpenBLAS reloaded with OPENBLAS_CORETYPE, results checked", {
  skip: haveBlas ? false : "OpenBLAS not installed",
}, () => {
  const natural = blasInFreshProcess({});
  const core = /, core (\w+)/.exec(natural)?.[1];
  assert.ok(core, natural);
  // Emulate a CPU this OpenBLAS does not know: the first load is told it detected Prescott.
  const trapped = blasInFreshProcess({ detectedCore: "Prescott" });
  if (/^(SkylakeX|Cooperlake|SapphireRapids)$/.test(core))
    assert.match(trapped, /, core SkylakeX \(forced from Prescott: core Prescott uses SSE, the CPU has AVX-512\)/);
  else if (/^(Haswell|Zen)$/.test(core)) assert.match(trapped, /, core Haswell \(forced from Prescott/);
  // A user's choice stands, even the slow one; the dispatcher's measurement is what keeps it off the hot path.
  const user = blasInFreshProcess({ coretype: "Prescott" });
  assert.match(user, /, core Prescott \(OPENBLAS_CORETYPE=Prescott set by the user\)/);
});

test("the blasLib setting picks the library; one that is not a BLAS is named and nothing is loaded", {
  skip: haveBlas ? false : "OpenBLAS not installed",
}, () => {
  const openmp = "/usr/lib/x86_64-linux-gnu/openblas-openmp/libopenblas.so.0";
  const pthread = "/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0";
  // Positive control: by default the generic soname is loaded.
  assert.match(blasInFreshProcess({}), /\(libopenblas\.so\.0\)/);
  for (const lib of [openmp, pthread].filter((p) => existsSync(p))) assert.ok(blasInFreshProcess({ blasLib: lib }).includes(`(${lib})`), lib);
  const bad = blasInFreshProcess({ blasLib: "/usr/lib/x86_64-linux-gnu/libm.so.6" }, false);
  assert.match(bad, /^none \(blas_lib \/usr\/lib\/x86_64-linux-gnu\/libm\.so\.6 is not a loadable BLAS with cblas_sgemm\)$/);
});
