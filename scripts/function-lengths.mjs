// Short loops (issue 42): no function in actors/, cli/commands/ or serve/ longer than MAX_LINES, so each core loop
// reads as a plan of named steps. Run by the test suite, usable alone: `node scripts/function-lengths.mjs`.
// Callbacks passed inline count toward the function that holds them, as a reader meets them there.
import { readFileSync } from "node:fs";
import { dirname, join, relative, resolve, sep } from "node:path";
import { fileURLToPath } from "node:url";
import ts from "typescript";
import { sourcesUnder } from "./source-files.mjs";

export const MAX_LINES = 60;
export const CHECKED = ["actors", "cli/commands", "serve"];

/** Named functions, methods and constructors of a source longer than `max` lines, as "file:line name (n lines)". */
export function longFunctions(rel, text, max = MAX_LINES) {
  const sf = ts.createSourceFile(rel, text, ts.ScriptTarget.Latest, true);
  const out = [];
  const visit = (n) => {
    const named = ts.isFunctionDeclaration(n) || ts.isMethodDeclaration(n) || ts.isConstructorDeclaration(n) || ts.isGetAccessorDeclaration(n);
    if (named && n.body) {
      const first = sf.getLineAndCharacterOfPosition(n.getStart()).line;
      const lines = sf.getLineAndCharacterOfPosition(n.end).line - first + 1;
      if (lines > max) out.push(`${rel}:${first + 1} ${n.name ? n.name.getText(sf) : "constructor"} (${lines} lines, at most ${max})`);
    }
    ts.forEachChild(n, visit);
  };
  visit(sf);
  return out;
}

export function checkTree(root, max = MAX_LINES) {
  return CHECKED.flatMap((top) =>
    sourcesUnder(join(root, top)).flatMap((file) => longFunctions(relative(root, file).split(sep).join("/"), readFileSync(file, "utf8"), max)),
  );
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const problems = checkTree(resolve(dirname(fileURLToPath(import.meta.url)), ".."));
  for (const p of problems) console.error(p);
  console.log(problems.length === 0 ? "function lengths: ok" : `function lengths: ${problems.length} too long`);
  process.exit(problems.length === 0 ? 0 : 1);
}
