// The sandbox bench's machine figures: real measurements, and a clear NaN (not a made-up figure) when the
// interpreter to measure is missing.
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { forkExitCpuMs, forkScaling, pageFaultMicros } from "../../bench/machine-calibration.js";

describe("machine calibration", () => {
  it("a first touch of fresh memory costs more than a second touch", () => {
    const us = pageFaultMicros(16 * 1024 * 1024, 3);
    assert.ok(Number.isFinite(us) && us > 0, `page fault ${us} us`);
  });

  it("python3 forking a child that exits costs some CPU; a missing interpreter gives NaN", () => {
    const ms = forkExitCpuMs("/usr/bin/python3");
    assert.ok(Number.isFinite(ms) && ms > 0 && ms < 1000, `fork + exit ${ms} ms`);
    assert.ok(Number.isNaN(forkExitCpuMs("/nonexistent/python3")));
  });

  it("fork-and-copy and computation scaling are measured rates; a missing interpreter gives NaN", async () => {
    const s = await forkScaling("/usr/bin/python3", 2, 0.3);
    for (const [what, r] of Object.entries(s)) {
      assert.ok(r.one > 0 && r.all > 0 && Number.isFinite(r.ratio), `${what}: ${JSON.stringify(r)}`);
    }
    const missing = await forkScaling("/nonexistent/python3", 2, 0.3);
    assert.ok(Number.isNaN(missing.forks.one) && Number.isNaN(missing.compute.ratio), JSON.stringify(missing));
  });
});
