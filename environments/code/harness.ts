import { randomBytes } from "node:crypto";
import type { CodeSandbox, SandboxLimits } from "../public.js";

/**
 * Runs hidden unit tests against a model's code in the sandbox: as a batch, one case per test, when the
 * sandbox offers execBatch; else in one program that runs them all (below). The program is fixed; the solution and
 * tests arrive on stdin, so nothing the model writes becomes part of the harness source. Each test is a
 * Python expression that must evaluate to True in the solution's namespace; a test that raises fails.
 * The verdict line is tagged with a random nonce read before the solution runs, so a solution that prints
 * a fake verdict does not count (a solution that digs the nonce out of the interpreter could; the sandbox
 * keeps that contained, and the pass rate reflects only the tagged line).
 */
const HARNESS = String.raw`
import sys, json, types, builtins
_job = json.loads(sys.stdin.read())
_tag = _job.pop("nonce")
_out = sys.stdout
def _report(passed, error):
    _out.write("\n" + _tag + " " + json.dumps({"passed": passed, "total": len(_job["tests"]), "error": error}) + "\n")
    _out.flush()
_mod = types.ModuleType("solution")
try:
    exec(compile(_job["code"], "solution.py", "exec"), _mod.__dict__)
except BaseException as e:
    _report(0, "solution failed to load: " + repr(e)[:300])
    raise SystemExit(0)
_passed = 0
for _t in _job["tests"]:
    try:
        if eval(_t, dict(_mod.__dict__)) is True:
            _passed += 1
    except BaseException:
        pass
_report(_passed, None)
`;

/**
 * One test per case: the same fixed program loads the solution and evaluates the one test expression it
 * reads on stdin, so every test runs in a fresh process (a test that crashes, hangs or corrupts state
 * fails alone) and gets its own verdict. Same nonce rule as HARNESS.
 */
const CASE_HARNESS = String.raw`
import sys, json, types
_job = json.loads(sys.stdin.read())
_tag = _job.pop("nonce")
_out = sys.stdout
def _report(ok, error):
    _out.write("\n" + _tag + " " + json.dumps({"ok": ok, "error": error}) + "\n")
    _out.flush()
_mod = types.ModuleType("solution")
try:
    exec(compile(_job["code"], "solution.py", "exec"), _mod.__dict__)
except BaseException as e:
    _report(False, "solution failed to load: " + repr(e)[:300])
    raise SystemExit(0)
try:
    _ok = eval(_job["test"], dict(_mod.__dict__)) is True
except BaseException:
    _ok = False
_report(_ok, None)
`;

export interface TestRun {
  passed: number;
  total: number;
  /** Why tests could not run (load error, timeout, crash); undefined when they ran. */
  error?: string;
}

export async function runHiddenTests(
  sandbox: CodeSandbox,
  code: string,
  tests: readonly string[],
  limits: SandboxLimits = { wallMs: 10_000, memoryMb: 512 },
): Promise<TestRun> {
  if (sandbox.execBatch && tests.length > 0) return runHiddenTestsBatched(sandbox, code, tests, limits);
  const nonce = `RS-VERDICT-${randomBytes(12).toString("hex")}`;
  const res = await sandbox.exec({ language: "python", code: HARNESS, stdin: JSON.stringify({ nonce, code, tests }), limits });
  const line = res.stdout
    .split("\n")
    .reverse()
    .find((l) => l.startsWith(`${nonce} `));
  if (!line) {
    const why = res.timedOut ? "timed out" : res.outOfMemory ? "out of memory" : `exit code ${res.exitCode}${res.signal ? ` (${res.signal})` : ""}`;
    return { passed: 0, total: tests.length, error: `tests did not finish: ${why}${res.stderr ? `: ${res.stderr.slice(-300)}` : ""}` };
  }
  const v = JSON.parse(line.slice(nonce.length + 1)) as { passed: number; total: number; error: string | null };
  return { passed: v.passed, total: v.total, ...(v.error ? { error: v.error } : {}) };
}

/**
 * The tests as one batch: one case per test, each limited to `limits`, the whole batch to the same wall
 * time one run of all tests has (limits.wallMs), so scoring takes no longer than before in the worst case.
 */
async function runHiddenTestsBatched(sandbox: CodeSandbox, code: string, tests: readonly string[], limits: SandboxLimits): Promise<TestRun> {
  const nonce = `RS-VERDICT-${randomBytes(12).toString("hex")}`;
  const batch = await sandbox.execBatch!({
    language: "python",
    code: CASE_HARNESS,
    cases: tests.map((test) => ({ stdin: JSON.stringify({ nonce, code, test }) })),
    limits,
    batchWallMs: limits.wallMs ?? 10_000,
  });
  let passed = 0;
  let error: string | undefined;
  batch.results.forEach((res, i) => {
    const line = res.stdout
      .split("\n")
      .reverse()
      .find((l) => l.startsWith(`${nonce} `));
    if (!line) {
      if (res.verdict === "skipped") error ??= `tests did not finish: the time budget ran out before test ${i + 1}`;
      else {
        const why = res.timedOut ? "timed out" : res.outOfMemory ? "out of memory" : `exit code ${res.exitCode}${res.signal ? ` (${res.signal})` : ""}`;
        error ??= `tests did not finish: ${why}${res.stderr ? `: ${res.stderr.slice(-300)}` : ""}`;
      }
      return;
    }
    const v = JSON.parse(line.slice(nonce.length + 1)) as { ok: boolean; error: string | null };
    if (v.ok) passed++;
    if (v.error) error ??= v.error;
  });
  return { passed, total: tests.length, ...(error ? { error } : {}) };
}
