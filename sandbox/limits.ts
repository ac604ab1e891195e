// Turns the limits of a request into the numbers the in-sandbox supervisor applies: request values
// override the defaults and are clamped to the operator's caps (a deployment with smaller caps still
// serves an environment written for a bigger one, with its own bounds).
import type { SandboxLimits } from "../environments/api/sandbox.js";
import type { SandboxSettings } from "./settings.js";

export interface EffectiveLimits {
  wallMs: number;
  cpuMs: number;
  memoryMb: number;
  maxProcesses: number;
  maxOutputBytes: number;
  maxFileBytes: number;
  maxOpenFiles: number;
}

/** soft or [soft, hard]; the supervisor maps names to RLIMIT_<NAME>. */
export type RlimitSpec = Record<string, number | [number, number]>;

export function resolveLimits(settings: SandboxSettings, req: SandboxLimits | undefined, outputCeiling = Infinity): EffectiveLimits {
  const d = settings.limits;
  const c = settings.maxLimits;
  const pick = (v: number | undefined, def: number, cap: number) => Math.min(v ?? def, cap);
  return {
    wallMs: pick(req?.wallMs, d.wallMs, c.wallMs),
    cpuMs: pick(req?.cpuMs, d.cpuMs, c.cpuMs),
    memoryMb: pick(req?.memoryMb, d.memoryMb, c.memoryMb),
    maxProcesses: pick(req?.maxProcesses, d.maxProcesses, c.maxProcesses),
    maxOutputBytes: Math.min(pick(req?.maxOutputBytes, d.maxOutputBytes, c.maxOutputBytes), outputCeiling),
    maxFileBytes: pick(req?.maxFileBytes, d.maxFileBytes, c.maxFileBytes),
    maxOpenFiles: d.maxOpenFiles,
  };
}

const MiB = 1024 * 1024;

export function toRlimits(l: EffectiveLimits, language: string, addressSpaceHeadroomMb: number): RlimitSpec {
  const cpuS = Math.max(1, Math.ceil(l.cpuMs / 1000));
  // node reserves ~0.8 GB of address space up front (heap cage, code range); python needs far less.
  const headroom = language === "node" ? 2 * addressSpaceHeadroomMb : addressSpaceHeadroomMb;
  return {
    // SIGXCPU at the soft limit, SIGKILL one second later if the program ignores it.
    cpu: [cpuS, cpuS + 1],
    data: l.memoryMb * MiB,
    as: (l.memoryMb + headroom) * MiB,
    fsize: l.maxFileBytes,
    // +1: the supervisor (pid 1) runs under the same uid and counts against the same limit.
    nproc: l.maxProcesses + 1,
    nofile: l.maxOpenFiles,
    core: 0,
    memlock: 0,
  };
}
