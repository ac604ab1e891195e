// The test runner script must not count a run as green when a test file's process ended early with exit
// code 0 and took its remaining tests with it (node's runner reports nothing about them): such a file is run
// again on its own, and the run passes only if every one of its tests then runs and passes.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const runTests = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "..", "scripts", "run-tests.mjs");

const COMPLETE = `import { test, describe } from "node:test";
describe("a suite", () => { test("one", () => {}); test("two", async () => { await new Promise((r) => setTimeout(r, 20)); }); });
test("three", () => {});
`;
// Ends its process with exit code 0 in the middle of the second test, once what came before has reached the
// runner: "two", "later suite" and "four" never run.
const CUT_SHORT = `import { test, describe } from "node:test";
describe("a suite", () => { test("one", () => {}); test("two", async () => { await new Promise((r) => setTimeout(r, 1000)); process.exit(0); }); });
describe("later suite", () => { test("three", () => {}); });
test("four", () => {});
`;
// Cut short like CUT_SHORT on its first run only (a marker file remembers): the runner runs it again on its own.
const CUT_SHORT_ONCE = `import { test, describe } from "node:test";
import { existsSync, writeFileSync } from "node:fs";
const marker = process.env.RS_TEST_MARKER;
describe("a suite", () => { test("one", () => {}); test("two", async () => { await new Promise((r) => setTimeout(r, 1000)); if (!existsSync(marker)) { writeFileSync(marker, "x"); process.exit(0); } }); });
test("three", () => {});
`;
// Cut short on its first two runs (the marker counts them): the runner's second rerun of it is complete.
const CUT_SHORT_TWICE = `import { test, describe } from "node:test";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
const marker = process.env.RS_TEST_MARKER;
describe("a suite", () => { test("one", () => {}); test("two", async () => { await new Promise((r) => setTimeout(r, 1000)); const n = existsSync(marker) ? Number(readFileSync(marker, "utf8")) : 0; if (n < 2) { writeFileSync(marker, String(n + 1)); process.exit(0); } }); });
test("three", () => {});
`;
// Ends its process before any of its tests is reported.
const EMPTY_EXIT = `process.exit(0);
import("node:test").then(({ test }) => test("never", () => {}));
`;

function runWith(files: Record<string, string>) {
  const dist = mkdtempSync(join(tmpdir(), "rs-run-tests-"));
  try {
    mkdirSync(join(dist, "test"));
    for (const [name, src] of Object.entries(files)) writeFileSync(join(dist, "test", name), src);
    // Without this test's own runner context: node refuses to start a run from inside a test file.
    const env: NodeJS.ProcessEnv = { ...process.env, RS_TEST_MARKER: join(dist, "marker") };
    delete env.NODE_TEST_CONTEXT;
    const r = spawnSync(process.execPath, [runTests, "--dist", dist], { encoding: "utf8", timeout: 60_000, env });
    return { code: r.status, out: r.stdout + r.stderr };
  } finally {
    rmSync(dist, { recursive: true, force: true });
  }
}

test("a complete run passes with no completeness complaint (control)", () => {
  const r = runWith({ "complete.test.js": COMPLETE });
  assert.equal(r.code, 0, r.out);
  assert.doesNotMatch(r.out, /test completeness/);
  assert.match(r.out, /ℹ pass 3/);
  assert.match(r.out, /^tests: 3 passed, 0 failed, 0 skipped$/m);
});

test("a suite whose hook fails fails the run, though all its tests passed", () => {
  const hookFails = `import { test, describe, after } from "node:test";
describe("hook fails", () => { after(() => { throw new Error("after boom"); }); test("fine", () => {}); });
`;
  const r = runWith({ "complete.test.js": COMPLETE, "hook.test.js": hookFails });
  assert.equal(r.code, 1, r.out);
  assert.match(r.out, /^tests: 4 passed, 1 failed, 0 skipped$/m);
});

test("a file cut short once is run again on its own, and the run passes when all its tests then pass", () => {
  const r = runWith({ "complete.test.js": COMPLETE, "once.test.js": CUT_SHORT_ONCE });
  assert.equal(r.code, 0, r.out);
  assert.match(r.out, /test completeness: 1 file\(s\) did not report every test; running them again on their own/);
  assert.match(r.out, /test completeness: on rerun 1 every test of those files was reported/);
  assert.match(r.out, /^tests: 6 passed, 0 failed, 0 skipped$/m);
});

test("a file cut short on its first rerun too is run again, and the run passes when a later rerun is complete", () => {
  const r = runWith({ "complete.test.js": COMPLETE, "twice.test.js": CUT_SHORT_TWICE });
  assert.equal(r.code, 0, r.out);
  assert.match(r.out, /test completeness: \d+ lost again on rerun 1; once more/);
  assert.match(r.out, /test completeness: on rerun 2 every test of those files was reported/);
  assert.match(r.out, /^tests: 6 passed, 0 failed, 0 skipped$/m);
});

test("tests lost to an early exit with code 0 fail the run and are named", () => {
  const r = runWith({ "complete.test.js": COMPLETE, "cut-short.test.js": CUT_SHORT, "empty.test.js": EMPTY_EXIT });
  assert.equal(r.code, 1, r.out);
  assert.match(r.out, /test completeness: "two" \(.*cut-short\.test\.js:2:\d+\) was queued but never reported/);
  assert.match(r.out, /test completeness: "later suite" \(.*cut-short\.test\.js:3:1\) was queued but never reported/);
  assert.match(r.out, /test completeness: "four" \(.*cut-short\.test\.js:4:1\) was queued but never reported/);
  assert.match(r.out, /test completeness: .*empty\.test\.js reported no test at all/);
  assert.doesNotMatch(r.out, /complete\.test\.js.*never reported/);
  assert.match(r.out, /test completeness: \d+ lost again on rerun 4$/m);
  assert.match(r.out, /^tests: \d+ passed, [1-9]\d* failed, 0 skipped$/m);
});
