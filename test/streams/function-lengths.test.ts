// Short loops (issue 42): no function in actors/ or cli/commands/ runs past 60 lines on the real tree, and the
// checker does catch one that does (positive control at the limit's edge).
import { test } from "node:test";
import assert from "node:assert/strict";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

// dist*/test/streams/ -> the repo root, where the sources and scripts/ live.
const root = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
type Lengths = {
  MAX_LINES: number;
  checkTree(root: string): string[];
  longFunctions(rel: string, text: string, max?: number): string[];
};
const lengths = (await import(pathToFileURL(join(root, "scripts", "function-lengths.mjs")).href)) as Lengths;

/** A function declaration `lines` lines long, its opening and closing lines included. */
function functionOf(name: string, lines: number): string {
  const body = Array.from({ length: lines - 2 }, (_, i) => `  const x${i} = ${i};`);
  return [`export function ${name}(): void {`, ...body, "}"].join("\n");
}

test("no function in actors/ or cli/commands/ is longer than 60 lines", () => {
  assert.equal(lengths.MAX_LINES, 60);
  assert.deepEqual(lengths.checkTree(root), []);
});

test("the checker reports a 61-line function and passes a 60-line one (positive control)", () => {
  const long = functionOf("long", 61);
  assert.equal(long.split("\n").length, 61);
  assert.deepEqual(lengths.longFunctions("actors/x.ts", long), ["actors/x.ts:1 long (61 lines, at most 60)"]);
  assert.deepEqual(lengths.longFunctions("actors/x.ts", functionOf("short", 60)), []);
  // Methods count too, where they sit in the file.
  const method = ["class A {", ...functionOf("m", 61).replace("export function m(): void", "m(): void").split("\n"), "}"].join("\n");
  assert.deepEqual(lengths.longFunctions("actors/x.ts", method), ["actors/x.ts:2 m (61 lines, at most 60)"]);
});
