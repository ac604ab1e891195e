"use strict";
// Runs INSIDE a sandbox as /.rs/boot.js (CommonJS there; .cjs here because the repo is "type": "module").
//   boot.js --zygote   the node fork server (see nodefork.c): loads and warms what most programs use, then
//                      forks one child per execution; each child runs the program handed over on fd 3 as
//                      its main script.
//   boot.js            a node started for one execution (a fresh-namespace request with files, whose own
//                      process must write them, or where the fork server could not start): runs its program
//                      the same way.
const fs = require("node:fs");
const path = require("node:path");

// All of fd's bytes as text; fd closed. The zygote's warm-up reads this file with it, so that a child finds it
// and the Buffer and fs functions it calls compiled (each was a lazy parse in every child).
function readAll(fd) {
  const chunks = [];
  const buf = Buffer.allocUnsafe(1 << 16);
  for (;;) {
    let n;
    try {
      n = fs.readSync(fd, buf, 0, buf.length, null);
    } catch (e) {
      if (e.code === "EAGAIN" || e.code === "EINTR") continue;
      throw e;
    }
    if (n === 0) break;
    chunks.push(Buffer.from(buf.subarray(0, n)));
  }
  buf.fill(0);
  fs.closeSync(fd);
  return Buffer.concat(chunks).toString("utf8");
}

// The program on fd (3: from the supervisor) run as the main module.
function runProgram(fd = 3) {
  const code = readAll(fd);
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
}

// Modules most programs load, and one pass through the code paths they run first (console formatting,
// compiling a module): a child finds them loaded and compiled instead of paying for that itself.
const PRELOAD = [
  "assert",
  "buffer",
  "child_process",
  "crypto",
  "events",
  "net",
  "os",
  "readline",
  "stream",
  "string_decoder",
  "tty",
  "url",
  "util",
  "v8",
  "zlib",
];

function warmUp() {
  for (const name of PRELOAD) require(`node:${name}`);
  const { Writable } = require("node:stream");
  const sink = new Writable({ write: (_chunk, _enc, done) => done() });
  const con = new console.Console({ stdout: sink, stderr: sink });
  con.log("%s %d", "warm", 1, [1, 2, 3], { a: { b: [1.5, "x", null] } }, new Map([[1, 2]]), new Error("warm-up"));
  con.error(42, true, undefined, Symbol("s"), () => 1);
  const Module = require("node:module");
  const m = new Module(path.join(process.cwd(), "[warm-up]"), null);
  m._compile("const xs = [3, 1, 2].sort((a, b) => a - b).map(String); JSON.parse(JSON.stringify({ xs })); String(xs).split(',');", m.id);
  // What each child runs before its program (zygote(), runProgram): its functions compiled here, once. The
  // empty program leaves argv and mainModule set, which each child sets again for its own.
  readAll(fs.openSync(__filename, "r"));
  runProgram(fs.openSync("/dev/null", "r"));
  require("node:v8").setFlagsFromString("--random-seed=1"); // a child sets its own before any Math.random
}

// A young-generation collection, the last thing before serving: each child then allocates from an empty
// young generation instead of the warm-up's leftovers (less CPU an execution; a full collection instead made
// each child costlier). gc() is taken from a context of its own and the flag dropped again: no program sees a
// gc function.
function emptyYoungGeneration() {
  const v8 = require("node:v8");
  v8.setFlagsFromString("--expose-gc");
  const gc = require("node:vm").runInNewContext("gc");
  v8.setFlagsFromString("--no-expose-gc");
  gc({ type: "minor" });
}

function zygote() {
  const nf = require(path.join(__dirname, "nodefork.node"));
  // In a sandbox that serves many commands: node's code onto huge pages after this many forks (huge-text.h).
  // Not node's own --use-largepages, which reads /sys, never in a sandbox.
  const hugeAfter = Number(process.env.RS_NF_HUGE_TEXT_AFTER ?? "-1");
  delete process.env.RS_NF_HUGE_TEXT_AFTER;
  if (hugeAfter >= 0) nf.hugeTextAfter(hugeAfter);
  warmUp();
  emptyYoungGeneration();
  // Fresh namespaces per execution (supervisor.py passes pid 1's settings): out of the environment before
  // any child can see it.
  const mounts = process.env.RS_NF_MOUNTS ?? "";
  const filter = process.env.RS_NF_FILTER ?? "";
  const execUids = process.env.RS_NF_EXEC_UIDS === "1";
  // In a reused sandbox: the most pages to pin and pid 1's seal, which serve() loads on this process after
  // pinning (nodefork.c: survey). Absent when pid 1 had sealed itself before starting this server.
  const pinMax = Number(process.env.RS_NF_PIN ?? "0");
  const seal = process.env.RS_NF_SEAL ?? "";
  delete process.env.RS_NF_MOUNTS;
  delete process.env.RS_NF_FILTER;
  delete process.env.RS_NF_EXEC_UIDS;
  delete process.env.RS_NF_PIN;
  delete process.env.RS_NF_SEAL;
  nf.init(3, mounts, filter, execUids, pinMax, seal);
  // Returns only in a child (an execution, or the survey's): the zygote itself says it is ready on the socket
  // and stays in serve() until pid 1 goes away.
  const pid = nf.serve();
  // What node cached in the zygote and a child must not inherit: its pid, and the seed of Math.random. The
  // zygote never calls Math.random, so a child's first call seeds it from --random-seed: one of its own.
  Object.defineProperty(process, "pid", { value: pid, writable: false, enumerable: true, configurable: true });
  require("node:v8").setFlagsFromString(`--random-seed=${nf.randomSeed()}`);
  // node's own exit would join the zygote's worker threads, which a fork does not have: leave through
  // _exit once the 'exit' listeners (the program's too) have run.
  // An uncaught error emits 'exit' before node prints it: print it here, as node would, before leaving.
  let fatal = null;
  process.on("uncaughtExceptionMonitor", (err) => {
    fatal = { err };
  });
  const emit = process.emit;
  process.emit = function (event, ...args) {
    const r = emit.call(this, event, ...args);
    if (event === "exit") {
      if (fatal) {
        try {
          const shown = require("node:util").inspect(fatal.err);
          fs.writeSync(2, `${fatal.err instanceof Error ? shown : `Uncaught ${shown}`}\n\nNode.js ${process.version}\n`);
        } catch {}
      }
      nf.exitNow(process.exitCode ?? args[0] ?? 0);
    }
    return r;
  };
  process.reallyExit = (code) => nf.exitNow(code ?? process.exitCode ?? 0);
  runProgram();
}

if (process.argv[2] === "--zygote") {
  zygote();
} else {
  runProgram();
}
