// rollstream added to a project the two ways README's "Add rollstream to a project" gives (issue 43). By tarball:
// `npm pack` of the current build (dist/ already compiled: the pack must not compile it again), then
// `npm install --offline <tarball>` into a fresh project: it installs with no registry and no cache (the
// tarball carries its dependencies and prebuilt native parts, which the install script checks load and
// does not rebuild), brings no TypeScript compiler, and the installed `rollstream` trains a tiny run
// against a real nats-server and evaluates the checkpoint; a second `npm install` rebuilds nothing. By
// folder: `npm install <clone>` runs the clone's prepare and install steps on every install of the project
// (npm does); each finds its outputs current and builds nothing. The controls: the install script did run
// (and said so) where "nothing rebuilt" could pass because nothing ran, and a changed source does make it
// build.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, statSync, symlinkSync, utimesSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { stringify } from "yaml";
import { tinyConfig } from "../helpers/run-fixture.js";
import { startTestNats } from "../helpers/nats.js";

const distDir = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");
const repo = resolve(distDir, "..");

/**
 * npm and node as a user runs them: none of the npm_* variables a parent `npm test` would pass down. No nvcc: a CUDA
 * library the clone lacks would take minutes to build where nvcc exists (that part follows the same stamps as the
 * others, which the sandbox control below exercises).
 */
function cleanEnv(): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env, ROLLSTREAM_BLAS: "off", NVCC: "/nonexistent/nvcc" };
  for (const k of Object.keys(env)) if (k.startsWith("npm_")) delete env[k];
  delete env.NATS_URL;
  delete env["NODE_TEST_CONTEXT"];
  return env;
}

function sh(cmd: string, args: string[], cwd: string, timeout = 240_000) {
  const start = Date.now();
  const r = spawnSync(cmd, args, { cwd, env: cleanEnv(), encoding: "utf8", timeout, maxBuffer: 64 << 20 });
  // The last lines are enough to say what went wrong (npm can list thousands of files).
  return { status: r.status, out: `${r.stdout}${r.stderr}`.slice(-20_000), seconds: (Date.now() - start) / 1000 };
}

// Scripts' output shown (what they decided), npm's own notices (a line per packed file) not.
const NPM_QUIET = ["--no-audit", "--no-fund", "--foreground-scripts", "--loglevel=warn"];

/** Not part of a clone: build outputs of other kinds, runs, and the intermediate objects of the native builds. */
const SKIP = new Set([".git", "node_modules", "runs", "evals", ".carry", ".helpers", "tmp", "obj.target", "obj.cuda", ".deps"]);

/**
 * A clone of the package as it stands, in a temp folder: the sources and native builds (timestamps kept, which is
 * what "newer than its sources" compares), this test's own build as dist/ (copied last, so newer than every source,
 * as after `npm run build`, even where a source changed since this build), and the clone's node_modules linked file
 * by file (the tarball bundles the dependencies from there; a folder install leaves them alone).
 */
function stageClone(dir: string): string {
  const stage = join(dir, "rollstream");
  cpSync(repo, stage, {
    recursive: true,
    preserveTimestamps: true,
    filter: (src) => {
      const rel = relative(repo, src);
      const name = rel.split("/").at(-1) ?? "";
      return rel === "" || !(SKIP.has(name) || /^dist(-|$)/.test(rel) || name.endsWith(".tgz"));
    },
  });
  cpSync(distDir, join(stage, "dist"), { recursive: true });
  const linked = spawnSync("cp", ["-al", join(repo, "node_modules"), join(stage, "node_modules")]);
  if (linked.status !== 0) {
    // Another filesystem: a link to the folder instead (npm only reads a linked clone's node_modules).
    rmSync(join(stage, "node_modules"), { recursive: true, force: true });
    symlinkSync(join(repo, "node_modules"), join(stage, "node_modules"));
  }
  return stage;
}

function newProject(dir: string, name: string): string {
  const project = join(dir, name);
  mkdirSync(project);
  writeFileSync(join(project, "package.json"), JSON.stringify({ name, version: "1.0.0", private: true }));
  return project;
}

const mtimes = (files: string[]) => files.map((f) => statSync(f).mtimeMs);

test("npm pack + an offline npm install: compiled, prebuilt, no compiler, trains and evaluates, and a second install rebuilds nothing; a folder install rebuilds nothing either", async (t) => {
  const dir = mkdtempSync(join(tmpdir(), "rs-pkg-"));
  const nats = await startTestNats();
  try {
    const stage = stageClone(dir);

    // Pack: the build is current, so neither the TypeScript nor a native part is built again.
    const pack = sh("npm", ["pack", "--pack-destination", dir, ...NPM_QUIET], stage);
    assert.equal(pack.status, 0, pack.out);
    assert.match(pack.out, /dist\/ is up to date/, pack.out);
    assert.doesNotMatch(pack.out, /rollstream: (compiling|\w+: building)/, pack.out);
    const tarballs = readdirSync(dir).filter((f) => f.endsWith(".tgz"));
    assert.equal(tarballs.length, 1, `one tarball: ${tarballs.join(", ")}`);
    const tarball = join(dir, tarballs[0]!);

    // Install offline with an empty cache: nothing may come from a registry or from what npm ci left behind.
    const project = newProject(dir, "project");
    const cache = ["--offline", "--cache", join(dir, "empty-npm-cache")];
    const install = sh("npm", ["install", ...cache, ...NPM_QUIET, tarball], project);
    assert.equal(install.status, 0, install.out);
    // The control for "nothing rebuilt": the install script ran, checked each prebuilt part and kept it.
    assert.match(install.out, /rollstream: kernels: up to date/, install.out);
    assert.doesNotMatch(install.out, /rollstream: \w+: building/, install.out);
    const pkg = join(project, "node_modules", "rollstream");
    const release = join(pkg, "kernels", "build", "Release");
    for (const f of ["dist/cli/main.js", "dist/environments/public.d.ts", "kernels/build/Release/rollstream_kernels.node", "cli/dashboard/static/index.html"]) {
      assert.ok(existsSync(join(pkg, f)), `the tarball carries ${f}`);
    }
    assert.ok(existsSync(join(pkg, "node_modules", "uplot", "dist", "uPlot.iife.min.js")), "the dashboard's vendored chart library, where it reads it");
    assert.ok(!existsSync(join(pkg, "dist", "test")), "the tests stay out of the tarball");

    // No TypeScript compiler came with it; the control: the clone has one, where this check looks.
    const tscIn = (root: string) => ["node_modules/typescript", "node_modules/.bin/tsc"].filter((p) => existsSync(join(root, p)));
    assert.deepEqual(tscIn(repo), ["node_modules/typescript", "node_modules/.bin/tsc"], "the check can see a compiler");
    assert.deepEqual(tscIn(project), []);
    assert.deepEqual(tscIn(pkg), []);

    const help = sh("npx", ["--offline", "rollstream", "--help"], project);
    assert.equal(help.status, 0, help.out);
    assert.match(help.out, /Usage: rollstream/);

    // The installed command trains a tiny run against a real nats-server, then evaluates its checkpoint.
    writeFileSync(
      join(project, "run.yaml"),
      stringify(
        tinyConfig("pkg", "runs", {
          sft: { steps: 4, batchSize: 8 },
          rl: { steps: 3, batchSize: 8, groupSize: 4, maxAsyncLevel: 1, sampling: { temperature: 1, topP: 1, topK: 0, maxTokens: 4 } },
          checkpoint: { interval: 3, keepLast: 2, keepVersions: 2 },
        }),
      ),
    );
    const train = sh("npx", ["--offline", "rollstream", "train", "run.yaml", "--nats", nats.url, "--no-dashboard"], project);
    assert.equal(train.status, 0, train.out);
    assert.match(train.out, /held-out pass@1 at v3/, train.out);
    const ckpt = join("runs", "pkg", "checkpoints", "step-00000003");
    const evalRun = sh(
      "npx",
      ["--offline", "rollstream", "eval", "arithmetic", "-n", "4", "-r", "2", "--max-tokens", "4", "--checkpoint", ckpt, "--no-progress", "--json"],
      project,
    );
    assert.equal(evalRun.status, 0, evalRun.out);
    assert.match(evalRun.out, /"env": "arithmetic@/);

    // A second install: nothing rebuilt, nothing rewritten, in seconds.
    const installed = [join(release, "rollstream_kernels.node"), join(release, "librollstream_cpu.so"), join(pkg, "dist", "cli", "main.js")];
    const before = mtimes(installed);
    const again = sh("npm", ["install", ...cache, ...NPM_QUIET], project);
    assert.equal(again.status, 0, again.out);
    assert.doesNotMatch(again.out, /rollstream: (compiling|\w+: building)/, again.out);
    assert.deepEqual(mtimes(installed), before, "the installed addon and dist/ are untouched");
    assert.ok(again.seconds < 30, `the second install took ${again.seconds} s`);

    // By folder, twice: npm runs the clone's prepare and install steps each time; both find everything current.
    const byFolder = newProject(dir, "by-folder");
    const built = [join(stage, "kernels", "build", "Release", "rollstream_kernels.node"), join(stage, "dist", "cli", "main.js")];
    const builtBefore = mtimes(built);
    const folderSeconds: number[] = [];
    for (const round of [1, 2]) {
      const r = sh("npm", ["install", "--offline", ...NPM_QUIET, stage], byFolder);
      folderSeconds.push(r.seconds);
      assert.equal(r.status, 0, r.out);
      assert.match(r.out, /dist\/ is up to date/, `round ${round}: prepare ran and compiled nothing\n${r.out}`);
      assert.match(r.out, /rollstream: kernels: up to date/, `round ${round}: install ran and built nothing\n${r.out}`);
      assert.doesNotMatch(r.out, /rollstream: (compiling|\w+: building)/, r.out);
      assert.ok(r.seconds < 60, `folder install ${round} took ${r.seconds} s`);
    }
    assert.deepEqual(mtimes(built), builtBefore, "the clone's addon and dist/ are untouched");
    const viaLink = sh("npx", ["--offline", "rollstream", "--help"], byFolder);
    assert.equal(viaLink.status, 0, viaLink.out);

    // The controls for "current": a changed TypeScript source makes dist/ out of date (--check says so and
    // compiles nothing), and a changed C source does get its part rebuilt (the sandbox's, a quick build).
    const mainTs = join(stage, "cli", "main.ts");
    const later = new Date(Date.now() + 5_000);
    utimesSync(mainTs, later, later);
    const stale = sh(process.execPath, [join(stage, "scripts", "ts-build.mjs"), "--check"], stage);
    assert.equal(stale.status, 1, stale.out);
    assert.match(stale.out, /dist\/ is out of date: cli\/main\.ts changed since it was compiled/);
    const forkserver = join(stage, "sandbox", "supervisor", "build", "forkserver.so");
    const forkBefore = statSync(forkserver).mtimeMs;
    writeFileSync(join(stage, "sandbox", "supervisor", "pin-hot.h"), "\n", { flag: "a" });
    const changed = sh("npm", ["run", "install", ...NPM_QUIET], stage);
    assert.equal(changed.status, 0, changed.out);
    assert.match(changed.out, /rollstream: sandbox: building \(/, changed.out);
    assert.match(changed.out, /rollstream: kernels: up to date/, changed.out);
    assert.notEqual(statSync(forkserver).mtimeMs, forkBefore, "forkserver.so was rebuilt");
    t.diagnostic(
      `seconds: pack ${pack.seconds}, install ${install.seconds}, train ${train.seconds}, eval ${evalRun.seconds}, ` +
        `second install ${again.seconds}, folder installs ${folderSeconds.join(" and ")}`,
    );
  } finally {
    await nats.cleanup();
    rmSync(dir, { recursive: true, force: true });
  }
});
