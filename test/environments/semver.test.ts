// How environment pins use semver (the npm package): which version a range resolves to, and the error
// a bad range gets. Range grammar itself is the library's business and is not re-tested here.
import { test, after } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { findEnvironment, listEnvironments, parseEnvSpec } from "../../environments/registry.js";

const root = mkdtempSync(join(tmpdir(), "rs-semver-"));
after(() => rmSync(root, { recursive: true, force: true }));
// One search-path folder holding several versions of "multi" (entries need not exist to be found).
const VERSIONS = ["1.0.0", "1.4.2", "1.10.0", "1.11.0-rc.1", "2.0.0", "0.3.1"];
for (const v of VERSIONS) {
  const dir = join(root, "extra", `multi-${v}`);
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, "package.json"), JSON.stringify({ name: "multi", version: v }));
}
const opts = { projectRoot: root, distDir: join(root, "dist-x"), nodeModules: [join(root, "node_modules")], searchPaths: [join(root, "extra")] };
const resolved = async (spec: string) => (await findEnvironment(spec, opts)).version;

test("a range resolves to the highest matching version (numeric order, no stray prereleases)", async () => {
  assert.equal(await resolved("multi"), "2.0.0");
  assert.equal(await resolved("multi@^1"), "1.10.0"); // 1.10 > 1.4, and 1.11.0-rc.1 is not picked
  assert.equal(await resolved("multi@~1.4"), "1.4.2");
  assert.equal(await resolved("multi@1.0.0"), "1.0.0");
  assert.equal(await resolved("multi@>=1.0.0 <1.10.0"), "1.4.2");
  assert.equal(await resolved("multi@^0.3 || ^2"), "2.0.0");
  assert.equal(await resolved("multi@1.0.0 - 1.5"), "1.4.2");
  assert.equal(await resolved("multi@^1.11.0-rc.0"), "1.11.0-rc.1"); // named prerelease: allowed
  await assert.rejects(findEnvironment("multi@^3", opts), /environment "multi": no version matches "\^3"; found multi@2\.0\.0/);
});

test("listEnvironments orders versions highest first by semver, not by string", async () => {
  const order = (await listEnvironments(opts)).filter((i) => i.name === "multi").map((i) => i.version);
  assert.deepEqual(order, ["2.0.0", "1.11.0-rc.1", "1.10.0", "1.4.2", "1.0.0", "0.3.1"]);
});

test("a bad range is an error naming the spec and the range", () => {
  for (const bad of ["latest", "1.2.3.4", ">=one", "^1 <"]) {
    assert.throws(
      () => parseEnvSpec(`multi@${bad}`),
      (e: Error) => e.message === `invalid environment spec "multi@${bad}": invalid version range "${bad}"`,
      bad,
    );
  }
  assert.deepEqual(parseEnvSpec("multi@ ^1.2 "), { name: "multi", range: "^1.2" });
  assert.deepEqual(parseEnvSpec("multi@"), { name: "multi", range: "*" });
});
