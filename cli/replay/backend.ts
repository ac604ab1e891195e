// The kernel backend a replay runs on. A step is bit-exact only on the backend the run trained on: the
// same device, the same sgemm (our own kernel, or the very BLAS library and build the run loaded) and,
// when a BLAS library was in play, the same thread count. The learner records that backend when RL starts
// (KV learner.backend); this file sets this process up the same way where it can (BLAS dispatch off, or the
// run's measured sgemm routes pinned instead of measured again, the AVX2 sgemm kernel, the run's threads, the
// CUDA matmul mode) and, where it cannot, says why before the first step, so a difference is explained instead
// of reported as a bare MISMATCH.
import { availableParallelism } from "node:os";
import type { z } from "zod";
import { configureKernels, kernelSettings, resolveBackend, type Device, type DeviceRequest, type NativeBackend } from "../../kernels/native.js";
import { parseBackendInfo } from "../../kernels/index.js";
import type { StateKeySchemas } from "../../streams/index.js";

export type RecordedBackend = z.infer<(typeof StateKeySchemas)["learner.backend"]>;

export interface BackendPlan {
  device: Device;
  /** Kernel threads for the replayed steps (the run's when it recorded them). */
  threads: number | undefined;
  /** true: the run's backend; false: it could not be matched; null: the run did not record one. */
  matched: boolean | null;
  /** What was matched, or why not: printed before the first step. */
  lines: string[];
  /** The run's whole sgemm route table, when it recorded one (the lines only count it): printed by --verbose and --json. */
  routes?: string;
  /** Puts the process-wide modes back (replay may run inside a longer-lived process, e.g. a test). */
  restore(): void;
}

const info = (be: NativeBackend) => parseBackendInfo(be.info());
/** Routes the CPU dispatcher can pin (a measured table), as opposed to "on"/"off" or none recorded. */
const pinnable = (routes: string | undefined): routes is string => routes !== undefined && routes !== "on" && routes !== "off";
const avx512 = (simd: string) => simd.includes("avx512f-sgemm");
const plural = (n: number, what: string) => `${n} ${what}${n === 1 ? "" : "s"}`;

/** "class=blas|own" entries of a route table, by shape class. */
function routeTable(routes: string | undefined): Map<string, string> {
  const out = new Map<string, string>();
  for (const entry of (routes ?? "").split(",")) {
    const at = entry.lastIndexOf("=");
    if (at > 0) out.set(entry.slice(0, at), entry.slice(at + 1));
  }
  return out;
}

/** A route table in a few words ("12 shape classes, 9 to BLAS"): the whole table is --verbose's (it runs to 1,500 characters). */
export function summariseRoutes(routes: string): string {
  const table = routeTable(routes);
  const blas = [...table.values()].filter((v) => v === "blas").length;
  return `${table.size} shape class${table.size === 1 ? "" : "es"}, ${blas} to BLAS`;
}

/** How many of the `recorded` table's shape classes are routed otherwise (or not at all) in `here`'s. */
export function routesDiffering(recorded: string, here: string | undefined): number {
  const mine = routeTable(here);
  return [...routeTable(recorded)].filter(([cls, to]) => mine.get(cls) !== to).length;
}

/** The run's backend in words. */
export function describeBackend(b: RecordedBackend): string {
  const gemm = b.blasDispatch
    ? `sgemm dispatched to ${b.blas}${pinnable(b.blasRoutes) ? ` by measured routes (${summariseRoutes(b.blasRoutes)})` : ""}`
    : pinnable(b.blasRoutes) && !b.blas.startsWith("none")
      ? `our own sgemm (measured faster than ${b.blas} on every shape class)`
      : "our own sgemm (BLAS dispatch off)";
  if (b.device === "cuda") return `cuda (${b.simd}), matmuls ${b.matmul ?? "?"}, ${gemm}`;
  const threads = `${plural(b.threads, "thread")}${b.threadIndependent ? " (the bits do not depend on the count)" : ""}`;
  return `cpu, ${gemm}, ${avx512(b.simd) ? "AVX-512" : "AVX2"} sgemm kernel, ${threads}`;
}

/** Why BLAS is missing here, and what would load it. */
function blasHint(here: string): string {
  if (here.includes("blas_mode off")) return "; unset ROLLSTREAM_BLAS to load it";
  if (here.includes("not found")) return "; install that library (Debian/Ubuntu: apt-get install libopenblas0-pthread)";
  return "";
}

/**
 * Sets this process's kernels up like the run's (as far as this machine allows) and says what it did.
 * `fallback` is what to use when the run recorded nothing: the config's device and threads.
 */
export function matchBackend(recorded: RecordedBackend | null, fallback: { device: DeviceRequest; threads: number | undefined }): BackendPlan {
  if (!recorded) {
    const r = resolveBackend(fallback.device);
    const here = info(r.backend);
    const lines = [
      `kernel backend: the run did not record one (runs from before learner.backend); replaying on this machine's: ${r.device}, ${here.blas.startsWith("none") ? "our own sgemm" : `sgemm dispatched to ${here.blas}`}`,
    ];
    if (!here.blas.startsWith("none")) lines.push("  if steps differ: a run trained on our own sgemm replays bit-exactly with ROLLSTREAM_BLAS=off");
    return { device: r.device, threads: fallback.threads, matched: null, lines, restore: () => undefined };
  }

  const matched: string[] = [];
  const unmatched: string[] = [];
  let device: Device = recorded.device;
  let resolved: ReturnType<typeof resolveBackend>;
  try {
    resolved = resolveBackend(device);
  } catch (e) {
    // Only CUDA can be missing; the CPU backend is always built.
    unmatched.push(`the run trained on CUDA (${recorded.simd}); this machine cannot: ${(e as Error).message}`);
    device = "cpu";
    resolved = resolveBackend("cpu");
  }
  const be = resolved.backend;
  const before = kernelSettings();
  const loadedHere = () => !info(be).blas.startsWith("none");

  if (device === recorded.device) {
    if (!recorded.blasDispatch) {
      // Whether the library is here at all: the user's mode, unless that is off (then it stays unloaded).
      const couldLoad = before.blasMode !== "off" && loadedHere();
      const loaded = info(be).blas;
      configureKernels({ blasMode: "off" });
      matched.push(`BLAS dispatch off, as in the run${couldLoad ? ` (${loaded} is here but not used)` : ""}`);
    } else {
      // The run's routing, never a fresh measurement: every product goes where it went in the run. A CPU run from
      // before measured routing sent every product of at least 2^19 multiply-adds to BLAS: mode "on" is that rule.
      const pin = device === "cpu" && pinnable(recorded.blasRoutes) ? recorded.blasRoutes : null;
      if (before.blasMode !== "off") configureKernels({ blasMode: device === "cpu" && !pin ? "on" : "auto", blasRoutes: pin ?? "" });
      const on = loadedHere();
      const here = info(be).blas;
      // Pinned routes read back: a class routed otherwise here would make its products differ.
      const differ = on && pin ? routesDiffering(pin, info(be).blasRoutes) : 0;
      if (on && here === recorded.blas && differ === 0)
        matched.push(`sgemm dispatched to the same library: ${here}${pin ? `, routes pinned as recorded (${summariseRoutes(pin)}; none differ here)` : ""}`);
      else if (on && here === recorded.blas && pin)
        unmatched.push(`of the run's sgemm routes (${summariseRoutes(pin)}), ${differ} differ here after pinning them`);
      else
        unmatched.push(
          `the run dispatched sgemm to ${recorded.blas}; here ${on ? `the library is ${here}` : `BLAS dispatch is unavailable: ${here}${blasHint(here)}`}`,
        );
    }
    if (device === "cpu") {
      // Both micro-kernels give the same bits (test/kernels/sgemm.test.ts); matched for clarity all the same.
      configureKernels({ simd: avx512(recorded.simd) ? "best" : "avx2" });
      const wide = avx512(info(be).simd);
      if (wide === avx512(recorded.simd)) matched.push(`${wide ? "AVX-512" : "AVX2"} sgemm kernel, as in the run`);
      else matched.push("AVX2 sgemm kernel (no AVX-512 here; both kernels give the same bits)");
    } else {
      const matmul = (["fp32", "tf32", "bf16"] as const).find((m) => m === recorded.matmul);
      if (matmul) configureKernels({ cudaMatmul: matmul }); // read when the model is created
      matched.push(`matmuls in ${recorded.matmul ?? "the default mode"}, as in the run`);
      // cuBLAS picks its algorithms per GPU; our own kernels run the same order everywhere.
      if (recorded.blasDispatch && info(be).simd !== recorded.simd) unmatched.push(`the run's GPU was ${recorded.simd}; here ${info(be).simd}`);
    }
  }
  const cores = availableParallelism();
  if (device === "cpu") {
    const slow = recorded.threads > cores ? ` (this machine has ${plural(cores, "core")}: slower, same bits)` : "";
    matched.push(`${plural(recorded.threads, "thread")}, as in the run${slow}`);
  }

  const lines = [`the run's RL steps ran on: ${describeBackend(recorded)} (recorded at RL step ${recorded.step})`];
  if (unmatched.length === 0) lines.push(`backend matched: ${matched.join("; ")}`);
  else {
    lines.push(`backend NOT matched, so steps cannot be bit-exact: ${unmatched.join("; ")}`);
    const here = info(be);
    lines.push(`  replaying on: ${device}, ${here.blas.startsWith("none") ? `our own sgemm (${here.blas})` : `sgemm dispatched to ${here.blas}`}`);
    lines.push("  each step shows the largest relative difference of its figures from the record instead");
  }
  return {
    device,
    threads: recorded.threads,
    matched: unmatched.length === 0,
    lines,
    ...(pinnable(recorded.blasRoutes) ? { routes: recorded.blasRoutes } : {}),
    restore: () => configureKernels(before),
  };
}
