"use strict";
// Runs INSIDE a sandbox as /.rs/boot.js (CommonJS there; .cjs here because the repo is "type": "module").
// It runs the program handed over on fd 3 as the main script of this node process. A warm sandbox
// starts this ahead of time and it blocks in readSync (no CPU) until the supervisor writes the program.
const fs = require("node:fs");
const path = require("node:path");
try {
  fs.writeSync(4, "r");
  fs.closeSync(4);
} catch {}
const chunks = [];
const buf = Buffer.allocUnsafe(1 << 16);
for (;;) {
  let n;
  try {
    n = fs.readSync(3, buf, 0, buf.length, null);
  } catch (e) {
    if (e.code === "EAGAIN" || e.code === "EINTR") continue;
    throw e;
  }
  if (n === 0) break;
  chunks.push(Buffer.from(buf.subarray(0, n)));
}
fs.closeSync(3);
const code = Buffer.concat(chunks).toString("utf8");
const cwd = process.cwd();
const filename = path.join(cwd, "[eval]");
process.argv = [process.argv[0]];
if (/^\s*(import\s*[\w{*"']|export\s)/m.test(code)) {
  // ES module syntax: data: URL modules may import node builtins and absolute paths.
  import("data:text/javascript;base64," + Buffer.from(code).toString("base64")).catch((e) => {
    console.error(e);
    process.exitCode = 1;
  });
} else {
  const Module = require("node:module");
  const m = new Module(filename, null);
  m.filename = filename;
  m.paths = Module._nodeModulePaths(cwd);
  process.mainModule = m;
  m._compile(code, filename);
}
