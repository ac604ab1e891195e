// A third party's first environment package, end to end: `rollstream env init --package` writes it, it
// compiles with tsc against rollstream's public API alone ("rollstream/environments", its types from the
// exports map) and passes its own tests; `npm pack` + an offline `npm install` of the tarball put it in a
// fresh project, where `rollstream env list` finds it, `rollstream train` trains on it for a few steps and
// `rollstream eval` evaluates the checkpoint. Its folder on ROLLSTREAM_ENV_PATH works too, with no
// rollstream of its own. The control: importing the installed package with plain node fails to find
// rollstream — what the registry's resolver supplies.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { stringify } from "yaml";
import { cliMain } from "../helpers/run-fixture.js";

const repo = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");

function sh(cmd: string, args: string[], cwd: string, env: NodeJS.ProcessEnv = process.env, timeout = 180_000) {
  const r = spawnSync(cmd, args, { cwd, env, encoding: "utf8", timeout });
  return { status: r.status, out: `${r.stdout}${r.stderr}` };
}

test("an environment package built from the public API alone installs by tarball or folder, trains and evaluates", async () => {
  const dir = mkdtempSync(join(tmpdir(), "rs-envpkg-"));
  const env: NodeJS.ProcessEnv = { ...process.env, ROLLSTREAM_BLAS: "off" };
  delete env.NATS_URL;
  delete env.ROLLSTREAM_ENV_PATH;
  delete env["NODE_TEST_CONTEXT"]; // the package's own `node --test` is a run of its own, not a subtest of this one
  try {
    const pkgDir = join(dir, "pkgs", "wordcount");
    const init = sh(process.execPath, [cliMain, "env", "init", "wordcount", "--package", pkgDir], dir, env);
    assert.equal(init.status, 0, init.out);
    const source = readFileSync(join(pkgDir, "src", "index.ts"), "utf8");
    assert.deepEqual(
      [...source.matchAll(/from "([^"]+)"/g)].map((m) => m[1]),
      ["rollstream/environments", "node:fs"],
      "the package imports rollstream's public API and nothing else of it",
    );
    // What `npm install --no-save <rollstream>` and `npm install` give it: rollstream as a linked peer, its dev tools.
    mkdirSync(join(pkgDir, "node_modules", "@types"), { recursive: true });
    symlinkSync(repo, join(pkgDir, "node_modules", "rollstream"));
    symlinkSync(join(repo, "node_modules", "typescript"), join(pkgDir, "node_modules", "typescript"));
    symlinkSync(join(repo, "node_modules", "@types", "node"), join(pkgDir, "node_modules", "@types", "node"));
    const tsc = sh(process.execPath, [join(pkgDir, "node_modules", "typescript", "bin", "tsc"), "-p", "tsconfig.json"], pkgDir, env);
    assert.equal(tsc.status, 0, `the package compiles against rollstream's declarations\n${tsc.out}`);
    const own = sh(process.execPath, ["--test", "dist/test/"], pkgDir, env);
    assert.equal(own.status, 0, `the package's own tests pass\n${own.out}`);
    assert.match(own.out, /# pass 3/);
    assert.match(own.out, /^ok \d+ - wordcount: the eval split shares no problem with train$/m);

    // By tarball, into a fresh project, offline (the tarball carries no dependencies; rollstream is a peer).
    const pack = sh("npm", ["pack", "--silent"], pkgDir, env);
    assert.equal(pack.status, 0, pack.out);
    const project = join(dir, "project");
    mkdirSync(project);
    writeFileSync(join(project, "package.json"), JSON.stringify({ name: "project", version: "1.0.0", private: true }));
    const install = sh("npm", ["install", "--offline", "--legacy-peer-deps", "--no-audit", "--no-fund", join(pkgDir, "wordcount-0.1.0.tgz")], project, env);
    assert.equal(install.status, 0, install.out);
    const list = sh(process.execPath, [cliMain, "env", "list"], project, env);
    assert.match(list.out, /^wordcount@0\.1\.0 +npm /m);

    // The control: plain node cannot load it — the package has no rollstream of its own.
    const plain = sh(process.execPath, ["--input-type=module", "-e", `await import("wordcount")`], project, env);
    assert.notEqual(plain.status, 0);
    assert.match(plain.out, /Cannot find package 'rollstream'/);

    writeFileSync(
      join(project, "run.yaml"),
      stringify({
        run: "wc",
        outDir: "runs",
        model: {
          vocabSize: 288,
          hiddenSize: 32,
          intermediateSize: 64,
          numLayers: 1,
          numHeads: 2,
          numKvHeads: 1,
          maxPositionEmbeddings: 64,
          threads: 1,
          seed: 5,
        },
        environments: [{ id: "wordcount@^0.1" }],
        sft: { steps: 4, batchSize: 8 },
        rl: { steps: 3, batchSize: 8, groupSize: 4, maxAsyncLevel: 1, sampling: { temperature: 1, topP: 1, topK: 0, maxTokens: 8 } },
        eval: { n: 8 },
        checkpoint: { interval: 3, keepLast: 2, keepVersions: 2 },
        actors: { inference: { replicas: 1, maxInFlight: 4, threads: 1 }, reward: { replicas: 1, maxInFlight: 4 } },
      }),
    );
    const train = sh(process.execPath, [cliMain, "train", "run.yaml", "--no-dashboard"], project, env);
    assert.equal(train.status, 0, train.out);
    assert.match(train.out, /held-out pass@1 at v3/);
    const ckpt = join("runs", "wc", "checkpoints", "step-00000003");
    const evalTar = sh(
      process.execPath,
      [cliMain, "eval", "wordcount", "-n", "4", "-r", "2", "--max-tokens", "8", "--checkpoint", ckpt, "--no-progress", "--json"],
      project,
      env,
    );
    assert.equal(evalTar.status, 0, evalTar.out);
    assert.match(evalTar.out, /"env": "wordcount@0\.1\.0"/);

    // By folder: the package's parent on ROLLSTREAM_ENV_PATH, its node_modules gone (no rollstream of its own).
    rmSync(join(pkgDir, "node_modules"), { recursive: true });
    rmSync(join(project, "node_modules"), { recursive: true });
    const byPath = sh(
      process.execPath,
      [cliMain, "eval", "wordcount", "-n", "4", "-r", "1", "--max-tokens", "8", "--checkpoint", ckpt, "--no-progress", "--json", "--overwrite"],
      project,
      { ...env, ROLLSTREAM_ENV_PATH: join(dir, "pkgs") },
    );
    assert.equal(byPath.status, 0, byPath.out);
    assert.match(byPath.out, /"env": "wordcount@0\.1\.0"/);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
