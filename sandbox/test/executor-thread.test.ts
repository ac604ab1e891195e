// The service's executor on a worker thread: it serves what the in-process executor serves (errors keep
// their codes across the thread), its counters reach the service, and when the worker dies its
// sandboxes die with it and every waiting request fails with a clear error instead of hanging.
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { pino } from "pino";
import { ThreadedExecutor, workerExecArgv } from "../executor-thread.js";
import { SandboxRequestError } from "../errors.js";
import { SandboxFailure } from "../sandbox-process.js";

/** Running (a zombie has died: it waits for this process to reap it, which the actor's exit does). */
const alive = (pid: number) => {
  try {
    return readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]?.[0] !== "Z";
  } catch {
    return false;
  }
};

describe("workerExecArgv", () => {
  it("drops the flags a worker refuses or must not re-run, keeps the rest", () => {
    const argv = ["--input-type=module", "-e", "import('x')", "--max-old-space-size=300", "--eval=1", "--enable-source-maps"];
    assert.deepEqual(workerExecArgv(argv), ["--max-old-space-size=300", "--enable-source-maps"]);
    assert.deepEqual(workerExecArgv(["--trace-warnings"]), ["--trace-warnings"], "nothing to drop: unchanged");
  });
});

describe("ThreadedExecutor", { timeout: 60_000 }, () => {
  let ex: ThreadedExecutor;
  before(async () => {
    ex = await ThreadedExecutor.create({ poolSize: 2, isolation: { hostUidBase: 1_700_000_000 } }, pino({ level: "warn" }));
  });
  after(async () => {
    await ex?.close();
  });

  it("runs programs, batches and sessions on the worker, and errors keep their codes", async () => {
    const r = await ex.exec({ language: "python", code: "import os; print(os.getuid())" });
    assert.equal(r.stdout, "65534\n");
    const b = await ex.execBatch({
      language: "python",
      code: "print(int(input()) * 2)",
      cases: [
        { stdin: "2\n", expectedStdout: "4\n" },
        { stdin: "5\n", expectedStdout: "11\n" },
      ],
    });
    assert.deepEqual(
      b.results.map((c) => c.verdict),
      ["passed", "failed"],
    );
    await ex.openSession("s1", { language: "python" });
    await ex.sessionExec("s1", { language: "bash", code: "echo kept > f.txt" });
    assert.equal((await ex.sessionExec("s1", { language: "bash", code: "cat f.txt" })).stdout, "kept\n");
    assert.equal(await ex.closeSession("s1"), true);
    assert.equal(await ex.closeSession("s1"), false, "closing twice reports the second as a no-op");
    const missing = await ex.sessionExec("nope", { language: "python", code: "1" }).catch((e: unknown) => e);
    assert.ok(missing instanceof SandboxRequestError && missing.code === 404, String(missing));
    const bad = await ex.execBatch({ language: "python", code: "1", cases: [] }).catch((e: unknown) => e);
    assert.ok(bad instanceof SandboxRequestError && bad.code === 400, String(bad));
    // The counters the service reports come from the worker.
    const s = ex.stats();
    assert.ok((s["execs_total"] ?? 0) >= 5, JSON.stringify(s));
    assert.equal(s["sessions_opened_total"], 1);
  });

  it("when the worker dies, its sandboxes die and waiting requests fail with a clear error", async () => {
    // (A sandbox killed a moment ago, e.g. the closed session's, may still be listed: keep the living.)
    const pids = (await ex.sandboxPids()).filter(alive);
    assert.ok(pids.length >= 2, `live sandboxes before: ${pids.join(",")}`);
    const waiting = ex.exec({ language: "python", code: "import time; time.sleep(20)", limits: { wallMs: 30_000 } });
    await new Promise((r) => setTimeout(r, 300));
    await ex.terminateWorker();
    const err = await waiting.catch((e: unknown) => e);
    assert.ok(err instanceof SandboxFailure, String(err));
    assert.match((err as Error).message, /sandbox worker thread/);
    const later = await ex.exec({ language: "python", code: "print(1)" }).catch((e: unknown) => e);
    assert.ok(later instanceof SandboxFailure, "a dead executor refuses at once");
    const deadline = Date.now() + 5_000;
    while (pids.some(alive) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    assert.deepEqual(pids.filter(alive), [], "every sandbox died with the worker thread");
    assert.match(await ex.died, /sandbox worker thread exited/, "the service learns that its executor is gone");
  });
});
