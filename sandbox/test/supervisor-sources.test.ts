// The in-sandbox programs are plain files (sandbox/supervisor/); tsc never sees them, so a syntax
// error would only show when a sandbox starts. Syntax-check every one, with a broken file as control.
import { describe, it, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { extname, join, relative, resolve, sep } from "node:path";
import { NODE_BOOT_JS, SUPERVISOR_PY, supervisorDir } from "../supervisor-source.js";

let tmp = "";

/** Exit status and stderr of the syntax check for one file; throws for an extension nobody checks. */
function check(file: string): { ok: boolean; stderr: string } {
  const ext = extname(file);
  const r =
    ext === ".py"
      ? // Bytecode goes to the temp dir, not a __pycache__ beside the source.
        spawnSync("python3", ["-m", "py_compile", file], { encoding: "utf8", env: { ...process.env, PYTHONPYCACHEPREFIX: join(tmp, "pycache") } })
      : [".js", ".cjs", ".mjs"].includes(ext)
        ? spawnSync(process.execPath, ["--check", file], { encoding: "utf8" })
        : ext === ".c" || ext === ".h"
          ? // nodefork.c includes node's N-API and libuv headers, from the running node's install (as build.sh).
            spawnSync(
              process.env["CC"] ?? "cc",
              ["-fsyntax-only", "-Wall", "-Wextra", "-Werror", `-I${resolve(process.execPath, "../../include/node")}`, file],
              {
                encoding: "utf8",
              },
            )
          : ext === ".sh"
            ? spawnSync("bash", ["-n", file], { encoding: "utf8" })
            : null;
  if (!r) throw new Error(`no syntax check for ${file}: add one to this test`);
  if (r.error) throw r.error;
  return { ok: r.status === 0, stderr: r.stderr };
}

describe("sandbox supervisor sources", () => {
  before(() => {
    tmp = mkdtempSync(join(tmpdir(), "rs-supervisor-check-"));
  });
  after(() => rmSync(tmp, { recursive: true, force: true }));

  it("are found in the source tree, not the build folder, and are what the runtime folder gets", () => {
    const dir = supervisorDir();
    assert.ok(dir.endsWith(join("sandbox", "supervisor")), dir);
    assert.ok(!relative(process.cwd(), dir).split(sep)[0]!.startsWith("dist"), `${dir} is inside a build folder`);
    assert.equal(SUPERVISOR_PY, readFileSync(join(dir, "supervisor.py"), "utf8"));
    assert.equal(NODE_BOOT_JS, readFileSync(join(dir, "boot.cjs"), "utf8"));
  });

  it("every file passes its syntax check (py_compile / node --check / cc -fsyntax-only / bash -n)", () => {
    const files = readdirSync(supervisorDir())
      .filter((n) => n !== "__pycache__" && n !== "build")
      .sort();
    assert.deepEqual(
      files.filter((n) => [".py", ".cjs"].includes(extname(n))),
      ["boot.cjs", "supervisor.py"],
    );
    for (const name of files) {
      const r = check(join(supervisorDir(), name));
      assert.ok(r.ok, `${name} failed its syntax check:\n${r.stderr}`);
    }
  });

  it("the checks reject a broken file (positive control)", () => {
    const cases: Array<[string, string]> = [
      ["broken.py", "def f(:\n    return 1\n"],
      ["broken.cjs", "const x = ;\n"],
      ["broken.js", "function (\n"],
      ["broken.mjs", "export const = 1;\n"],
      ["broken.c", "int f(void) { return 1 }\n"],
      ["broken.h", "static int f(void) { return 1 }\n"],
      ["broken.sh", "if then fi\n"],
    ];
    for (const [name, text] of cases) {
      const file = join(tmp, name);
      writeFileSync(file, text);
      const r = check(file);
      assert.equal(r.ok, false, `${name} passed its syntax check`);
      assert.match(r.stderr, /SyntaxError|error/, `${name}: ${r.stderr}`);
    }
  });
});
