#!/usr/bin/env node
// The package's "prepare" step: compiles the TypeScript into dist/ unless dist/ is already newer than every source.
// npm runs prepare after `npm ci` in a clone, before `npm pack`, and on EVERY `npm install` of a project that installed
// this clone by folder (`npm install /path/to/clone`), where recompiling each time cost minutes and rewrote dist/ under
// whatever ran from it. `npm run build` still compiles unconditionally.
// Fresh means: each source .ts under tsconfig.json's "include" has its .js in dist/, at least as new as it, and
// tsconfig.json is older than all of them (tsc rewrites every output on each run). A tarball made by `npm pack` has
// no tsconfig.json and no sources: dist/ is what it ships, and there is nothing to do.
//   node scripts/ts-build.mjs           compile when stale
//   node scripts/ts-build.mjs --check   only say whether dist/ is current (exit 0) or not, and why (exit 1)
import { spawnSync } from "node:child_process";
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const tsconfigPath = join(root, "tsconfig.json");
if (!existsSync(tsconfigPath)) process.exit(0);
const tsconfig = JSON.parse(readFileSync(tsconfigPath, "utf8"));
const outDir = join(root, tsconfig.compilerOptions?.outDir ?? "dist");
const skip = new Set(["node_modules", "build", "dist"]);

/** Why dist/ is stale (the first reason found), or null when it is fresh. */
function staleness() {
  const configTime = statSync(tsconfigPath).mtimeMs;
  for (const top of tsconfig.include ?? []) {
    const stack = [top];
    while (stack.length > 0) {
      const rel = stack.pop();
      const abs = join(root, rel);
      if (!existsSync(abs)) continue;
      if (statSync(abs).isDirectory()) {
        for (const name of readdirSync(abs)) if (!skip.has(name)) stack.push(join(rel, name));
        continue;
      }
      if (!rel.endsWith(".ts") || rel.endsWith(".d.ts")) continue;
      const out = join(outDir, rel.replace(/\.ts$/, ".js"));
      if (!existsSync(out)) return `${out} is missing`;
      const outTime = statSync(out).mtimeMs;
      if (outTime < statSync(abs).mtimeMs) return `${rel} changed since it was compiled`;
      if (outTime < configTime) return "tsconfig.json changed since the last build";
    }
  }
  return null;
}

const why = staleness();
if (why === null) {
  console.log("rollstream: dist/ is up to date (newer than every source); not recompiled");
  process.exit(0);
}
if (process.argv.includes("--check")) {
  console.log(`rollstream: dist/ is out of date: ${why}`);
  process.exit(1);
}
let tsc;
try {
  tsc = createRequire(join(root, "package.json")).resolve("typescript/bin/tsc");
} catch {
  console.error(`rollstream: dist/ needs compiling (${why}) but TypeScript is not installed in ${root}: run \`npm ci\` there (it installs the dev tools)`);
  process.exit(1);
}
console.log(`rollstream: compiling the TypeScript (${why})`);
const r = spawnSync(process.execPath, [tsc, "-p", tsconfigPath], { cwd: root, stdio: "inherit" });
process.exit(r.status ?? 1);
