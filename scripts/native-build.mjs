#!/usr/bin/env node
// The package's "install" step (prepack runs it too): every native part of rollstream is there and loads, and none
// is built twice. A part is built only when its outputs are missing, were built from other sources (a hash of the
// sources, kept in a stamp file beside the outputs), or do not load on this machine. So:
//   - a tarball made by `npm pack` carries the parts prebuilt (linux-x64) with their stamps: the install checks
//     that they load and builds nothing, offline (node-gyp would otherwise want node's headers from the network);
//     a prebuilt part that does not load here (an older glibc, another CPU) is rebuilt from the shipped sources;
//   - a clone installed into a project by folder (`npm install /path/to/clone`), which npm runs this for on every
//     `npm install` of that project, costs a hash and a load check per part, not a rebuild.
// The parts:
//   kernels  the N-API addon + librollstream_cpu.so (node-gyp)           required: the install fails without it
//   cuda     librollstream_cuda.so (kernels/cuda/build.sh, needs nvcc)    optional: the CPU backend is used without it
//   sandbox  sandbox/supervisor/build/{forkserver.so,nodefork.node}      optional: the sandbox service refuses to
//   spawn    sandbox/spawn/build/Release/rs_spawn.node (node-gyp)          start without them, naming the fix
// Outputs with no stamp (built before stamps existed) are kept, and stamped, when they are newer than every source
// and load. An optional part whose build failed is not tried again until its sources or its toolchain change (its
// stamp says so, and every install says it is missing). `node scripts/native-build.mjs --force` rebuilds every part.
import { createHash } from "node:crypto";
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, readdirSync, readFileSync, realpathSync, rmSync, statSync, writeFileSync } from "node:fs";
import { delimiter, dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const force = process.argv.includes("--force");
const say = (line) => console.log(`rollstream: ${line}`);

/** Files under `dir` (relative to the package root), recursively, sorted; `build` folders are outputs, not sources. */
function filesUnder(dir) {
  const out = [];
  const walk = (rel) => {
    for (const name of readdirSync(join(root, rel))) {
      const r = join(rel, name);
      const st = statSync(join(root, r));
      if (st.isDirectory()) {
        if (name !== "build" && name !== "node_modules") walk(r);
      } else out.push(r);
    }
  };
  if (existsSync(join(root, dir))) walk(dir);
  return out.sort();
}

/** The hash a part's stamp records: each source's path and bytes, in a fixed order. */
function hashOf(paths) {
  const h = createHash("sha256");
  for (const p of paths) {
    h.update(p).update("\0");
    h.update(readFileSync(join(root, p))).update("\0");
  }
  return h.digest("hex");
}

function which(cmd) {
  for (const dir of (process.env.PATH ?? "").split(delimiter)) {
    const p = join(dir, cmd);
    if (dir && existsSync(p) && statSync(p).isFile()) return p;
  }
  return undefined;
}

/** Runs a command with its output shown (npm shows an install script's output when it fails, or with --foreground-scripts). */
function run(cmd, args, cwd = root) {
  const r = spawnSync(cmd, args, { cwd, stdio: "inherit" });
  if (r.error) return `${cmd}: ${r.error.message}`;
  return r.status === 0 ? null : `${cmd} ${args.join(" ")} exited with ${r.status ?? r.signal}`;
}

/** node-gyp as npm provides it to install scripts, else from PATH, else npm's own copy beside this node. */
function nodeGyp(args) {
  const fromNpm = process.env.npm_config_node_gyp;
  if (fromNpm && existsSync(fromNpm)) return run(process.execPath, [fromNpm, ...args]);
  const onPath = which("node-gyp");
  if (onPath) return run(onPath, args);
  const bundled = join(dirname(process.execPath), "..", "lib", "node_modules", "npm", "node_modules", "node-gyp", "bin", "node-gyp.js");
  if (existsSync(bundled)) return run(process.execPath, [bundled, ...args]);
  return "node-gyp not found (run this through npm, which provides it, or install node-gyp)";
}

/** Loads native files in a child node (a crash or a missing symbol must not take this script down); null when fine. */
function loads(code, files) {
  const r = spawnSync(process.execPath, ["-e", code, ...files], { encoding: "utf8", timeout: 60_000 });
  if (r.status === 0) return null;
  const why = `${r.stderr ?? ""}`.split("\n").find((l) => /Error|error:/.test(l)) ?? `exit ${r.status ?? r.signal}`;
  return why.trim();
}

function nvccPath() {
  const env = process.env.NVCC;
  if (env) return existsSync(env) ? env : which(env);
  return which("nvcc") ?? (existsSync("/usr/local/cuda/bin/nvcc") ? "/usr/local/cuda/bin/nvcc" : undefined);
}

const rel = (...p) => join(...p);
const KREL = rel("kernels", "build", "Release");

/**
 * Each part: its sources (hashed into the stamp), its outputs, a load check (null when it loads), how to build it,
 * and for an optional part the toolchain it needs (missing: say so and build nothing; a failed build is tried
 * again only when this description changes).
 */
const parts = [
  {
    name: "kernels",
    required: true,
    sources: () => [
      rel("kernels", "binding.gyp"),
      rel("kernels", "kernels.h"),
      ...filesUnder(rel("kernels", "cpu")),
      ...filesUnder(rel("kernels", "shared")),
      ...filesUnder(rel("kernels", "addon")),
    ],
    outputs: [rel(KREL, "rollstream_kernels.node"), rel(KREL, "librollstream_cpu.so")],
    stamp: rel(KREL, "kernels.stamp"),
    check: ([addon, lib]) =>
      loads(
        "const a = require(process.argv[1]); const be = a.openBackend(process.argv[2]); if (!(be.deviceCount() >= 1)) throw new Error('the CPU backend sees no device');",
        [addon, lib],
      ),
    // Not `node-gyp rebuild`: that deletes kernels/build, the CUDA library (built apart, by nvcc) with it.
    build: () => {
      for (const p of ["rollstream_kernels.node", "librollstream_cpu.so", "obj.target", ".deps"]) rmSync(join(root, KREL, p), { recursive: true, force: true });
      return nodeGyp(["configure", "build", "--directory=kernels", "--jobs=max"]);
    },
  },
  {
    name: "cuda",
    sources: () => [
      ...filesUnder(rel("kernels", "cuda")).filter((p) => /\.(cu|cuh|map|sh)$/.test(p)),
      rel("kernels", "kernels.h"),
      ...filesUnder(rel("kernels", "shared")),
    ],
    outputs: [rel(KREL, "librollstream_cuda.so")],
    stamp: rel(KREL, "cuda.stamp"),
    toolchain: () => {
      const nvcc = nvccPath();
      return nvcc ? `nvcc ${realpathSync(nvcc)}` : undefined;
    },
    missing: "nvcc not found: the CUDA backend is not built (the CPU backend will be used)",
    build: () => run("bash", [join(root, "kernels", "cuda", "build.sh")]),
  },
  {
    name: "sandbox",
    sources: () => filesUnder(rel("sandbox", "supervisor")).filter((p) => /\.(c|h|sh)$/.test(p)),
    outputs: [rel("sandbox", "supervisor", "build", "forkserver.so"), rel("sandbox", "supervisor", "build", "nodefork.node")],
    stamp: rel("sandbox", "supervisor", "build", "sandbox.stamp"),
    check: ([, nodefork]) => loads("require(process.argv[1]);", [nodefork]),
    toolchain: () => {
      const cc = which(process.env.CC ?? "cc");
      return cc ? `${realpathSync(cc)} node ${process.version}` : undefined;
    },
    missing: "no C compiler (cc): sandbox/supervisor is not built (the sandbox service refuses to start until it is)",
    build: () => run("bash", [join(root, "sandbox", "supervisor", "build.sh")]),
  },
  {
    name: "spawn",
    sources: () => [rel("sandbox", "spawn", "binding.gyp"), rel("sandbox", "spawn", "spawn.cc")],
    outputs: [rel("sandbox", "spawn", "build", "Release", "rs_spawn.node")],
    stamp: rel("sandbox", "spawn", "build", "Release", "spawn.stamp"),
    check: ([addon]) => loads("require(process.argv[1]);", [addon]),
    toolchain: () => {
      const cxx = which(process.env.CXX ?? "g++") ?? which("c++");
      return cxx ? `${realpathSync(cxx)} node ${process.version}` : undefined;
    },
    missing: "no C++ compiler: sandbox/spawn (rs_spawn) is not built (the sandbox service refuses to start until it is)",
    build: () => nodeGyp(["rebuild", "--directory=sandbox/spawn"]),
  },
];

function readStamp(path) {
  try {
    return JSON.parse(readFileSync(join(root, path), "utf8"));
  } catch {
    return null;
  }
}

function writeStamp(part, stamp) {
  const file = join(root, part.stamp);
  mkdirSync(dirname(file), { recursive: true });
  writeFileSync(file, `${JSON.stringify({ part: part.name, ...stamp })}\n`);
}

/** Whether every output is at least as new as the newest source (for outputs built before stamps existed). */
function newerThanSources(sourcePaths, outputs) {
  const newest = Math.max(...sourcePaths.map((p) => statSync(join(root, p)).mtimeMs));
  return outputs.every((p) => statSync(p).mtimeMs >= newest);
}

/** Makes one part current; returns false only when a required part could not be built. */
function ensure(part) {
  const sourcePaths = part.sources();
  const sources = hashOf(sourcePaths);
  const outputs = part.outputs.map((p) => join(root, p));
  const stamp = readStamp(part.stamp);
  const present = outputs.every((p) => existsSync(p));
  const adopt = !force && present && stamp === null && newerThanSources(sourcePaths, outputs);
  let reason = "not built yet";
  if (!force && present && ((stamp?.sources === sources && stamp.built === "ok") || adopt)) {
    const broken = part.check?.(outputs) ?? null;
    if (broken === null) {
      if (adopt) writeStamp(part, { sources, built: "ok" });
      say(`${part.name}: up to date`);
      return true;
    }
    reason = `built but does not load here (${broken})`;
  } else if (force) reason = "--force";
  else if (present && stamp === null) reason = "older than its sources, with no stamp";
  else if (present && stamp.sources !== sources) reason = "its sources changed since it was built";
  const toolchain = part.toolchain?.();
  if (part.toolchain && toolchain === undefined) {
    say(`${part.name}: ${part.missing}${present ? ` (the one there, ${reason}, is left as it is)` : ""}`);
    return true;
  }
  if (!force && stamp?.built === "failed" && stamp.sources === sources && stamp.toolchain === toolchain) {
    say(`${part.name}: not built (its last build failed and nothing changed since: ${stamp.error}); \`node scripts/native-build.mjs --force\` tries again`);
    return true;
  }
  say(`${part.name}: building (${reason})`);
  const start = Date.now();
  let error = part.build();
  if (error === null && !outputs.every((p) => existsSync(p))) error = `the build made no ${part.outputs.filter((p) => !existsSync(join(root, p))).join(", ")}`;
  if (error === null) error = part.check?.(outputs) ?? null;
  if (error === null) {
    writeStamp(part, { sources, built: "ok" });
    say(`${part.name}: built in ${Math.round((Date.now() - start) / 1000)} s`);
    return true;
  }
  if (part.required) {
    console.error(
      `rollstream: ${part.name}: build FAILED: ${error} (it needs g++ and make; node-gyp needs node's headers: nodedir in .npmrc, or the network once)`,
    );
    return false;
  }
  writeStamp(part, { sources, built: "failed", toolchain, error });
  say(`${part.name}: not built (${error}); rollstream works without it`);
  return true;
}

let ok = true;
for (const part of parts) ok = ensure(part) && ok;
process.exit(ok ? 0 : 1);
