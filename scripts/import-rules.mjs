// The layering rules of DESIGN §1, checked on the sources (run by the test suite, usable alone:
// `node scripts/import-rules.mjs`). An actor and cli/ reach the wire only through streams/index.ts;
// no actor imports another actor; cli/ imports only actors/runtime/ and actors/registry.ts from actors/; serve/
// (`rollstream serve`, whose generate route the inference actor mounts) follows the same two rules as cli/ and
// imports no cli/ file;
// rl/ (the algorithm, pure functions) imports only rl/. And control code never reads a metrics event: an
// actor or a cli/ command that reads `.values[...]` or `.labels[...]` decides from a display channel; only
// the display code (the dashboard, train's progress view) may.
import { readFileSync } from "node:fs";
import { dirname, join, relative, resolve, sep } from "node:path";
import { fileURLToPath } from "node:url";
import ts from "typescript";
import { sourcesUnder } from "./source-files.mjs";

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
    if ((top === "actors" || top === "cli" || top === "serve") && target.startsWith("streams/") && target !== "streams/index.ts") {
      problems.push(`${rel}: imports ${target} (use the streams/ facade, streams/index.ts)`);
    }
    if (top === "cli" && target.startsWith("actors/") && !target.startsWith("actors/runtime/") && target !== "actors/registry.ts") {
      problems.push(`${rel}: imports ${target} (cli/ may use actors/runtime/ and actors/registry.ts only)`);
    }
    if (top === "serve" && ((target.startsWith("actors/") && !target.startsWith("actors/runtime/")) || target.startsWith("cli/"))) {
      problems.push(`${rel}: imports ${target} (serve/ may use actors/runtime/ only from actors/, and no cli/ file)`);
    }
    const from = actorOf(rel);
    const to = actorOf(target);
    if (from && from !== "runtime" && to && from !== to && to !== "runtime") {
      problems.push(`${rel}: imports ${target} (an actor never imports another actor)`);
    }
    if (top === "rl" && !target.startsWith("rl/")) {
      problems.push(`${rel}: imports ${target} (rl/ is the algorithm as pure functions: it imports rl/ only)`);
    }
    if (from === "runtime" && target.startsWith("actors/") && to !== "runtime") {
      problems.push(`${rel}: imports ${target} (actors/runtime/ is shared by every actor and imports none)`);
    }
  }
  return problems;
}

/** The display code, which alone reads metrics events' values and labels. */
const DISPLAY = [/^cli\/dashboard\//, /^cli\/train\/progress\.ts$/];
/** A read of a metrics event's values or labels: `e.values["x"]`, `e.labels?.["task"]`, `e.values.loss`. */
const METRICS_READ = /\.(values|labels)(\?\.|!)?(\[|\.[A-Za-z_$])/;

/** Lines of a control source that read a metrics event, as "file:line: text (rule)". */
export function metricsReads(rel, text) {
  if (DISPLAY.some((d) => d.test(rel))) return [];
  return text
    .split("\n")
    .flatMap((line, i) =>
      METRICS_READ.test(line) ? [`${rel}:${i + 1}: ${line.trim()} (control code reads a metrics event: use a typed channel, e.g. groups or steps)`] : [],
    );
}

export function checkTree(root) {
  const problems = [];
  for (const top of ["actors", "cli", "serve", "rl"]) {
    for (const file of sourcesUnder(join(root, top))) {
      const rel = relative(root, file).split(sep).join("/");
      const text = readFileSync(file, "utf8");
      problems.push(...checkFile(rel, importsOf(root, file, text)));
      if (top !== "rl") problems.push(...metricsReads(rel, text));
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
