"use strict";
// Runs INSIDE a sandbox as /.rs/boot.js (CommonJS there; .cjs here because the repo is "type": "module").
//   boot.js            runs the program handed over on fd 3 as the main script of this node process. A
//                      warm sandbox starts this ahead of time and it blocks in readSync (no CPU) until the
//                      supervisor writes the program.
//   boot.js --zygote   the node fork server (see nodefork.c): loads and warms what most programs use, then
//                      forks one child per execution; each child runs its program exactly as above.
const fs = require("node:fs");
const path = require("node:path");

function runProgram() {
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
  buf.fill(0);
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
}

function zygote() {
  const nf = require(path.join(__dirname, "nodefork.node"));
  warmUp();
  // Fresh namespaces per execution (supervisor.py passes pid 1's settings): out of the environment before
  // any child can see it.
  const mounts = process.env.RS_NF_MOUNTS ?? "";
  const filter = process.env.RS_NF_FILTER ?? "";
  delete process.env.RS_NF_MOUNTS;
  delete process.env.RS_NF_FILTER;
  nf.init(3, mounts, filter);
  fs.writeSync(nf.socketFd(), "r");
  // Returns only in a child: the zygote itself stays in serve() until pid 1 goes away.
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
  try {
    fs.writeSync(4, "r");
    fs.closeSync(4);
  } catch {}
  runProgram();
}
