// settings.cpus: the sandboxes (supervisor and every execution it forks) run on the CPUs named; by
// default on every CPU; a list naming a CPU the machine lacks is refused in one line at start.
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { cpus } from "node:os";
import { assertCpusExist, cpuList } from "../isolation.js";
import { parseSandboxSettings } from "../settings.js";
import { describeResult, startSandboxFixture, type SandboxFixture } from "./fixture.js";

const AFFINITY = "import os; print(sorted(os.sched_getaffinity(0)))";

describe("settings.cpus: the list", () => {
  it("expands ranges, and is empty when unset", () => {
    assert.equal(cpuList("0-2,5"), "0,1,2,5");
    assert.equal(cpuList("3"), "3");
    assert.equal(cpuList(undefined), "");
  });

  it("rejects what is not a CPU list, naming the setting", () => {
    assert.throws(() => parseSandboxSettings({ cpus: "0-" }), /cpus.*CPU list like 0-3,8/);
    assert.throws(() => parseSandboxSettings({ cpus: "all" }), /cpus/);
    assert.equal(parseSandboxSettings({ cpus: "0-1,3" }).cpus, "0-1,3");
  });

  it("rejects CPUs the machine lacks in one line (and accepts those it has)", () => {
    assert.throws(() => assertCpusExist("0,7", 4), /^Error: sandbox settings\.cpus "0,7" names CPU 7, but this machine has CPUs 0-3$/);
    assert.doesNotThrow(() => assertCpusExist("0-3", 4));
    assert.doesNotThrow(() => assertCpusExist(undefined, 1));
  });
});

describe("settings.cpus: where executions run", { timeout: 120_000 }, () => {
  let pinned: SandboxFixture;
  let free: SandboxFixture;
  before(async () => {
    pinned = await startSandboxFixture({ poolSize: 1, cpus: "0" });
    free = await startSandboxFixture({ poolSize: 1 });
  });
  after(async () => {
    await pinned?.stop();
    await free?.stop();
  });

  it("pins every execution, pool and session, to the CPUs named", async () => {
    for (let i = 0; i < 3; i++) {
      const r = await pinned.client.exec({ language: "python", code: AFFINITY });
      assert.equal(r.stdout, "[0]\n", describeResult(r));
    }
    const s = await pinned.client.openSession({ language: "python" });
    try {
      const r = await s.exec({ language: "python", code: AFFINITY });
      assert.equal(r.stdout, "[0]\n", describeResult(r));
    } finally {
      await s.close();
    }
    assert.ok(pinned.service.executor.isolation.lines.some((l) => l.includes("CPUs: 0")));
  });

  it("control: without the setting an execution may run on every CPU", async () => {
    const r = await free.client.exec({ language: "python", code: AFFINITY });
    const all = Array.from({ length: cpus().length }, (_, i) => i);
    assert.equal(r.stdout, `${JSON.stringify(all).replaceAll(",", ", ")}\n`, describeResult(r));
  });

  it("a CPU the machine lacks stops the start with the one-line reason", async () => {
    await assert.rejects(startSandboxFixture({ poolSize: 1, cpus: String(cpus().length + 7) }), /settings\.cpus .* names CPU \d+, but this machine has CPUs/);
  });
});
