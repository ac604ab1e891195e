#!/usr/bin/env node
// Runs every compiled *.test.js under dist/test and dist/sandbox/test (the sandbox package's own tests) with
// node's own test runner.
// Node 20 has no glob support in `node --test`, so we collect the files here.
// Usage: node scripts/run-tests.mjs [--dist DIR] [filter-substring ...]
import { once } from "node:events";
import { existsSync, readdirSync, statSync } from "node:fs";
import { join } from "node:path";
import { run } from "node:test";
import { spec } from "node:test/reporters";
import { TestCompleteness } from "./test-completeness.mjs";

function collect(dir, out) {
  for (const name of readdirSync(dir)) {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) collect(p, out);
    else if (name.endsWith(".test.js")) out.push(p);
  }
  return out;
}
// --dist DIR picks another build folder (helpers working in parallel each build into their own).
let distDir = "dist";
const argv = process.argv.slice(2);
const di = argv.indexOf("--dist");
if (di >= 0) {
  distDir = argv[di + 1];
  argv.splice(di, 2);
}
const filters = argv;
// The project's tests and the sandbox package's own (a build folder may hold only the first: the runner's tests make one).
const files = [join(distDir, "test"), join(distDir, "sandbox", "test")]
  .filter((dir) => existsSync(dir))
  .flatMap((dir) => collect(dir, []))
  .filter((f) => filters.length === 0 || filters.some((s) => f.includes(s)))
  .sort();
if (files.length === 0) {
  console.error("no test files matched");
  process.exit(1);
}
// forceExit: a safety net, so a file whose tests all finished ends even if a leaked handle would keep its
// event loop alive (the dashboard tests, which once leaked one, now exit without it). It applies to each test
// file's process; this process ends on its own once every event is reported.
// Tests start their own nats-server processes and use both cores for kernels: run files one at a time
// so timings stay sane on a 2-core machine.
async function runFiles(list) {
  const stream = run({ files: list, concurrency: 1, forceExit: true });
  const completeness = new TestCompleteness().observe(stream);
  const out = stream.compose(spec);
  out.pipe(process.stdout, { end: false });
  await once(out, "end");
  return completeness;
}

const first = await runFiles(files);
for (const line of first.problems()) console.error(`test completeness: ${line}`);
let final = first;
const lostFiles = first.filesWithLostTests();
if (lostFiles.length > 0) {
  // Seen about once in two full runs (streams/arrow-codec, whose many fast tests fill the pipe): node 20's runner
  // loses the rest of a file's events when a read of the file's output ends just after a message-size byte of
  // 0xFF (its partial-header handling puts that byte after the next read; a replay of its parsing code over
  // every cut of a message stream loses messages at exactly that cut). Those files run again on their own, up
  // to four times (a fresh-clone CI once lost the same file's events on the first rerun too); the run passes
  // only if every one of their tests then runs and passes.
  console.error(`test completeness: ${lostFiles.length} file(s) did not report every test; running them again on their own`);
  for (let attempt = 1; attempt <= 4; attempt++) {
    const again = await runFiles(lostFiles);
    const still = again.problems();
    final = first.replacingFiles(lostFiles, again);
    if (still.length === 0) {
      console.error(`test completeness: on rerun ${attempt} every test of those files was reported`);
      break;
    }
    for (const line of still) console.error(`test completeness (rerun ${attempt}): ${line}`);
    console.error(`test completeness: ${still.length} lost again on rerun ${attempt}${attempt < 4 ? "; once more" : ""}`);
  }
}
const { passed, failed, skipped, lost } = final.totals();
// One plain closing line over both runs (node's own summary above counts only the last run).
console.log(`tests: ${passed} passed, ${failed + lost} failed, ${skipped} skipped`);
process.exit(failed + lost > 0 ? 1 : 0);
