#!/usr/bin/env node
// Runs every compiled *.test.js under dist/test with node's own test runner.
// Node 20 has no glob support in `node --test`, so we collect the files here.
// Usage: node scripts/run-tests.mjs [--dist DIR] [filter-substring ...]
import { readdirSync, statSync } from "node:fs";
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
const files = collect(join(distDir, "test"), [])
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
const stream = run({ files, concurrency: 1, forceExit: true });
const completeness = new TestCompleteness().observe(stream);
stream.on("test:fail", () => {
  process.exitCode = 1;
});
stream.on("end", () => {
  const lost = completeness.problems();
  for (const line of lost) console.error(`test completeness: ${line}`);
  if (lost.length > 0) {
    console.error(`test completeness: ${lost.length} lost: a test file's process ended before it ran them`);
    process.exitCode = 1;
  }
});
stream.compose(spec).pipe(process.stdout);
