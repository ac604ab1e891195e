// The C loop reports a one-shot command before it resets its sandbox, so the reply does not wait for the
// reset; the sandbox serves nothing else until the reset is done. A program that leaves 4,000 files in /tmp
// makes the reset long enough to see: right after the reply its sandbox is still busy (resetting), then it
// comes back to the pool and the next command finds /tmp empty. Control: requests that carry a file, which
// the C loop hands to supervisor.py's own loop; that one resets before it reports, so its sandbox is idle again
// by the time the reply arrives.
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { setTimeout as sleep } from "node:timers/promises";
import { pino } from "pino";
import { SandboxExecutor } from "../index.js";
import { describeResult } from "./fixture.js";

const LITTER = "for i in range(4000):\n    open(f'/tmp/litter{i}', 'w').close()\nprint('made')";

async function until(what: string, ok: () => boolean, ms = 15_000): Promise<void> {
  const end = Date.now() + ms;
  while (!ok()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(5);
  }
}

for (const { deferred, name } of [
  { deferred: true, name: "C loop: the reply goes before the reset" },
  { deferred: false, name: "Python loop (control, requests with a file): the reset is done before the reply" },
]) {
  // The control's requests each carry a file: the C loop serves only requests without.
  const files = deferred ? undefined : { "f.txt": "" };
  describe(name, { timeout: 90_000 }, () => {
    it("the sandbox is reused only after its reset, and the next command finds nothing left", async () => {
      const ex = await SandboxExecutor.create({ poolSize: 1, runtimes: { node: { enabled: false } } }, pino({ level: "warn" }));
      try {
        await until("a warm sandbox", () => ex.stats().pool_idle_python === 1);
        const r = await ex.exec({ language: "python", code: LITTER, files });
        const busyAtReply = ex.stats().pool_busy;
        assert.equal(r.stdout, "made\n", describeResult(r));
        assert.equal(busyAtReply, deferred ? 1 : 0, "sandboxes still busy when the reply came");
        await until("the sandbox back in the pool", () => ex.stats().pool_idle_python === 1 && ex.stats().pool_busy === 0);
        const reusesBefore = ex.stats().pool_reuses_total;
        const next = await ex.exec({ language: "python", code: "import os\nprint(len(os.listdir('/tmp')))", files });
        assert.equal(next.stdout, "0\n", describeResult(next));
        assert.equal(ex.stats().pool_reuses_total, reusesBefore + 1, "the same sandbox served again: its reset was clean");
        assert.equal(ex.stats().sandboxes_retired_unclean_total, 0);
        // The stats say how long resets ran after replies, once both are done.
        await until("the second reset", () => ex.stats().pool_busy === 0);
        const st = ex.stats();
        // The littering command's reset ran after its reply; the second's may have been over before its reply
        // went out (its "reset" frame beat the output), which is not counted.
        if (deferred) assert.ok(st.resets_after_reply_total >= 1, JSON.stringify(st));
        else assert.equal(st.resets_after_reply_total, 0, JSON.stringify(st));
        if (deferred) assert.ok(st.reset_after_reply_ms_avg > 0, JSON.stringify(st));
      } finally {
        await ex.close();
      }
    });
  });
}
