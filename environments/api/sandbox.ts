// What an environment needs from a code sandbox. Environments know nothing of NATS: the actor runtime
// injects an implementation (the NATS client in streams/sandbox-client.ts implements this shape).
export type SandboxLanguage = "python" | "node" | "bash";

export interface SandboxLimits {
  wallMs?: number;
  cpuMs?: number;
  memoryMb?: number;
  maxProcesses?: number;
  maxOutputBytes?: number;
  maxFileBytes?: number;
}

export interface SandboxExecRequest {
  language: SandboxLanguage;
  /** Program text run by the interpreter. */
  code: string;
  stdin?: string;
  /** Extra files written into the work dir before running, path relative to it -> contents. */
  files?: Record<string, string>;
  limits?: SandboxLimits;
}

export interface SandboxExecResult {
  stdout: string;
  stderr: string;
  exitCode: number | null;
  signal: string | null;
  timedOut: boolean;
  outOfMemory: boolean;
  outputTruncated: boolean;
  wallMs: number;
  cpuMs: number;
}

/** One input of a batch: its own stdin, and optionally the stdout it must print to pass. */
export interface SandboxCase {
  stdin?: string;
  /** When set, the case passes only if stdout equals it (trailing whitespace of each line and of the whole ignored). */
  expectedStdout?: string;
}

/** One program run against many inputs, each in a fresh process and a freshly emptied work dir. */
export interface SandboxBatchRequest {
  language: SandboxLanguage;
  code: string;
  /** Written into the work dir before every case. */
  files?: Record<string, string>;
  cases: SandboxCase[];
  /** Limits of each case (wallMs: of one case). */
  limits?: SandboxLimits;
  /** Wall-clock budget of the whole batch; cases that cannot start within it are "skipped" (default: cases x wallMs). */
  batchWallMs?: number;
  /** Skip the remaining cases after the first one that does not pass. */
  stopOnFailure?: boolean;
}

/**
 * passed: exit 0 (and the expected stdout when one was given); failed: exit 0, wrong stdout; error: a
 * non-zero exit or a signal; timeout / oom / output-limit: the flags of the result; skipped: not run
 * (batch budget spent, or stopOnFailure).
 */
export type SandboxVerdict = "passed" | "failed" | "error" | "timeout" | "oom" | "output-limit" | "skipped";

export interface SandboxCaseResult extends SandboxExecResult {
  verdict: SandboxVerdict;
}

export interface SandboxBatchResult {
  results: SandboxCaseResult[];
  passed: number;
  /** Wall time of the whole batch on the sandbox host. */
  wallMs: number;
}

export interface SandboxSession {
  readonly id: string;
  exec(req: SandboxExecRequest): Promise<SandboxExecResult>;
  close(): Promise<void>;
}

export interface CodeSandbox {
  /** One-shot execution: a fresh process and work dir, nothing left by any earlier execution. */
  exec(req: SandboxExecRequest): Promise<SandboxExecResult>;
  /**
   * One program against many inputs in one request, each case isolated like a one-shot exec. Optional:
   * callers fall back to one exec per case (see `execCases`) when a sandbox does not offer it.
   */
  execBatch?(req: SandboxBatchRequest): Promise<SandboxBatchResult>;
  /** A sandbox kept for one rollout: files and state persist across exec calls until close(). */
  openSession(opts?: { language?: SandboxLanguage; idleTimeoutMs?: number }): Promise<SandboxSession>;
}

/** Verdict of one case's result (shared by the sandbox service and the exec fallback). */
export function caseVerdict(r: SandboxExecResult, expectedStdout?: string): SandboxVerdict {
  if (r.timedOut) return "timeout";
  if (r.outputTruncated) return "output-limit";
  if (r.outOfMemory) return "oom";
  if (r.exitCode !== 0) return "error";
  if (expectedStdout === undefined) return "passed";
  const norm = (t: string) => t.replace(/[ \t\r]+$/gm, "").trimEnd();
  return norm(r.stdout) === norm(expectedStdout) ? "passed" : "failed";
}

/** A batch through `execBatch` when the sandbox has it, else one `exec` per case (same results, no budget sharing). */
export async function execCases(sandbox: CodeSandbox, req: SandboxBatchRequest): Promise<SandboxBatchResult> {
  if (sandbox.execBatch) return sandbox.execBatch(req);
  const t0 = performance.now();
  const results: SandboxCaseResult[] = [];
  let stop = false;
  for (const c of req.cases) {
    if (stop) {
      results.push({ ...SKIPPED });
      continue;
    }
    const r = await sandbox.exec({ language: req.language, code: req.code, stdin: c.stdin, files: req.files, limits: req.limits });
    const verdict = caseVerdict(r, c.expectedStdout);
    results.push({ ...r, verdict });
    if (req.stopOnFailure && verdict !== "passed") stop = true;
  }
  return { results, passed: results.filter((r) => r.verdict === "passed").length, wallMs: performance.now() - t0 };
}

export const SKIPPED: SandboxCaseResult = Object.freeze({
  stdout: "",
  stderr: "",
  exitCode: null,
  signal: null,
  timedOut: false,
  outOfMemory: false,
  outputTruncated: false,
  wallMs: 0,
  cpuMs: 0,
  verdict: "skipped",
});
