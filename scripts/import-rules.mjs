// The layering rules of DESIGN §1, checked on the sources (run by the test suite, usable alone:
// `node scripts/import-rules.mjs`). An actor and cli/ reach the wire only through streams/index.ts;
// no actor imports another actor; cli/ imports only actors/runtime/ and actors/registry.ts from actors/.
import { readdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join, relative, resolve, sep } from "node:path";
import { fileURLToPath } from "node:url";
import ts from "typescript";

function sourcesUnder(dir, out = []) {
  for (const name of readdirSync(dir)) {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) sourcesUnder(p, out);
    else if (name.endsWith(".ts") && !name.endsWith(".d.ts")) out.push(p);
  }
  return out;
}

/** Repo-relative paths ("streams/index.ts") of the project files a source imports (static and dynamic). */
export function importsOf(root, file, text) {
  const { importedFiles } = ts.preProcessFile(text, true, true);
  return importedFiles
    .map((f) => f.fileName)
    .filter((s) => s.startsWith("."))
    .map((s) =>
      relative(root, resolve(dirname(file), s))
        .split(sep)
        .join("/")
        .replace(/\.js$/, ".ts"),
    );
}

/** Problems with one file's imports, as "file: imports target (rule)". */
export function checkFile(rel, imports) {
  const problems = [];
  const top = rel.split("/")[0];
  const actorOf = (p) => (p.startsWith("actors/") && p.split("/").length > 2 ? p.split("/")[1] : null);
  for (const target of imports) {
    if ((top === "actors" || top === "cli") && target.startsWith("streams/") && target !== "streams/index.ts") {
      problems.push(`${rel}: imports ${target} (use the streams/ facade, streams/index.ts)`);
    }
    if (top === "cli" && target.startsWith("actors/") && !target.startsWith("actors/runtime/") && target !== "actors/registry.ts") {
      problems.push(`${rel}: imports ${target} (cli/ may use actors/runtime/ and actors/registry.ts only)`);
    }
    const from = actorOf(rel);
    const to = actorOf(target);
    if (from && from !== "runtime" && to && from !== to && to !== "runtime") {
      problems.push(`${rel}: imports ${target} (an actor never imports another actor)`);
    }
    if (from === "runtime" && target.startsWith("actors/") && to !== "runtime") {
      problems.push(`${rel}: imports ${target} (actors/runtime/ is shared by every actor and imports none)`);
    }
  }
  return problems;
}

export function checkTree(root) {
  const problems = [];
  for (const top of ["actors", "cli"]) {
    for (const file of sourcesUnder(join(root, top))) {
      const rel = relative(root, file).split(sep).join("/");
      problems.push(...checkFile(rel, importsOf(root, file, readFileSync(file, "utf8"))));
    }
  }
  return problems;
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const problems = checkTree(resolve(dirname(fileURLToPath(import.meta.url)), ".."));
  for (const p of problems) console.error(p);
  console.log(problems.length === 0 ? "import rules: ok" : `import rules: ${problems.length} problem(s)`);
  process.exit(problems.length === 0 ? 0 : 1);
}
