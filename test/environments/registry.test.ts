import { test, after } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, mkdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { findEnvironment, listEnvironments, parseEnvSpec, resolveEnvironment } from "../../environments/registry.js";
import { envId } from "../../environments/api/index.js";

const root = mkdtempSync(join(tmpdir(), "rs-envreg-"));
after(() => rmSync(root, { recursive: true, force: true }));
const dist = join(root, "dist-x");

function write(path: string, text: string): void {
  mkdirSync(join(path, ".."), { recursive: true });
  writeFileSync(path, text);
}
const envModule = (name: string, version: string, body = "") => `
export function loadEnvironment(args) {
  ${body}
  return { name: ${JSON.stringify(name)}, version: ${JSON.stringify(version)}, args,
    dataset() { return { size: 0, row() { throw new Error("empty"); } }; },
    async rollout() { throw new Error("no"); }, async scoreGroup() { return []; } };
}`;
function projectEnv(folder: string, name: string, version: string, js: string | null): void {
  write(join(root, "environments", folder, "package.json"), JSON.stringify({ name, version }));
  if (js !== null) write(join(dist, "environments", folder, "index.js"), js);
}
projectEnv("good", "good", "2.1.0", envModule("good", "2.1.0"));
projectEnv("throws", "throws", "1.0.0", envModule("throws", "1.0.0", 'throw new Error("bad seed " + args.seed);'));
projectEnv("noload", "noload", "1.0.0", "export const x = 1;");
projectEnv("liar", "liar", "1.0.0", envModule("liar", "9.9.9"));
projectEnv("unbuilt", "unbuilt", "0.1.0", null);
projectEnv("broken", "broken", "1.0.0", "export function loadEnvironment( {");
projectEnv("notenv", "notenv", "1.0.0", "export function loadEnvironment() { return { name: 'notenv', version: '1.0.0' }; }");
write(join(root, "node_modules", "good", "package.json"), JSON.stringify({ name: "good", version: "3.0.0", main: "lib.js" }));
write(join(root, "node_modules", "good", "lib.js"), envModule("good", "3.0.0"));
write(
  join(root, "node_modules", "@org", "npmenv", "package.json"),
  JSON.stringify({
    name: "@org/npmenv",
    version: "1.4.0",
    keywords: ["rollstream-environment"],
    exports: { ".": { import: "./esm/main.js", require: "./cjs.js" } },
  }),
);
write(join(root, "node_modules", "@org", "npmenv", "esm", "main.js"), envModule("@org/npmenv", "1.4.0"));
write(join(root, "node_modules", "left-pad", "package.json"), JSON.stringify({ name: "left-pad", version: "1.3.0" }));
write(join(root, "extra", "pathenv", "package.json"), JSON.stringify({ name: "pathenv", version: "0.2.0", main: "index.js" }));
write(join(root, "extra", "pathenv", "index.js"), envModule("pathenv", "0.2.0"));

const opts = { projectRoot: root, distDir: dist, nodeModules: [join(root, "node_modules")], searchPaths: [join(root, "extra")] };

test("parseEnvSpec: names, ranges, scoped packages, bad specs", () => {
  assert.deepEqual(parseEnvSpec("math"), { name: "math", range: "*" });
  assert.deepEqual(parseEnvSpec("math@^1.2"), { name: "math", range: "^1.2" });
  assert.deepEqual(parseEnvSpec("@org/env@~2.0.1"), { name: "@org/env", range: "~2.0.1" });
  assert.deepEqual(parseEnvSpec("@org/env"), { name: "@org/env", range: "*" });
  assert.throws(() => parseEnvSpec("bad name@1"), /invalid environment spec "bad name@1"/);
  assert.throws(() => parseEnvSpec("math@latest"), /invalid environment spec "math@latest": invalid version range/);
});

test("resolves project, path and npm modules by range; highest matching version wins", async () => {
  const good2 = await resolveEnvironment("good@^2", { seed: 3 }, opts);
  assert.equal(envId(good2), "good@2.1.0");
  assert.deepEqual((good2 as unknown as { args: unknown }).args, { seed: 3 }, "args reach loadEnvironment");
  assert.equal(envId(await resolveEnvironment("good", {}, opts)), "good@3.0.0", "npm 3.0.0 beats project 2.1.0");
  assert.equal(envId(await resolveEnvironment("good@2.1.0 || 1.x", {}, opts)), "good@2.1.0");
  assert.equal(envId(await resolveEnvironment("@org/npmenv@1.4", {}, opts)), "@org/npmenv@1.4.0", "exports.import entry");
  assert.equal(envId(await resolveEnvironment("pathenv@0.2.0", {}, opts)), "pathenv@0.2.0");
  assert.equal((await findEnvironment("good@2", opts)).source, "project");
});

test("clear errors: missing, no matching version, unbuilt, import failure, no loadEnvironment, load throws, wrong shape, wrong version", async () => {
  await assert.rejects(resolveEnvironment("nosuch", {}, opts), /environment "nosuch" not found \(searched .*environments/);
  await assert.rejects(
    resolveEnvironment("good@^4", {}, opts),
    /environment "good": no version matches "\^4"; found good@3\.0\.0 \(npm, .*\), good@2\.1\.0 \(project, .*\)/,
  );
  await assert.rejects(
    resolveEnvironment("unbuilt", {}, opts),
    /environment unbuilt@0\.1\.0: entry .*dist-x\/environments\/unbuilt\/index\.js does not exist \(is the project built/,
  );
  await assert.rejects(resolveEnvironment("broken", {}, opts), /environment broken@1\.0\.0: importing .* failed/);
  await assert.rejects(resolveEnvironment("noload", {}, opts), /environment noload@1\.0\.0: .* does not export a loadEnvironment function/);
  await assert.rejects(resolveEnvironment("throws", { seed: 7 }, opts), /environment throws@1\.0\.0: loadEnvironment\(\{"seed":7\}\) threw: bad seed 7/);
  await assert.rejects(
    resolveEnvironment("notenv", {}, opts),
    /environment notenv@1\.0\.0: loadEnvironment did not return an Environment \(missing dataset, rollout, scoreGroup\)/,
  );
  await assert.rejects(resolveEnvironment("liar", {}, opts), /environment liar@1\.0\.0: loadEnvironment returned liar@9\.9\.9/);
});

test("listEnvironments: project and path modules, and npm packages marked as environments", async () => {
  const list = await listEnvironments(opts);
  const ids = list.map((i) => `${i.name}@${i.version}:${i.source}`);
  for (const want of ["good@2.1.0:project", "pathenv@0.2.0:path", "@org/npmenv@1.4.0:npm", "unbuilt@0.1.0:project"])
    assert.ok(ids.includes(want), `${want} in ${ids.join(", ")}`);
  assert.ok(!ids.some((i) => i.startsWith("left-pad")), "plain npm packages are not listed");
  assert.ok(!ids.includes("good@3.0.0:npm"), "npm packages without the rollstream-environment keyword are not listed");
});

test("the project's built-ins resolve from this build (arithmetic@^1)", async () => {
  const env = await resolveEnvironment("arithmetic@^1.0.0", { digits: 1 });
  assert.equal(envId(env), "arithmetic@1.0.0");
  assert.equal(env.dataset("train").row(0).prompt[0]!.role, "user");
  const names = (await listEnvironments()).map((i) => i.name);
  assert.ok(names.includes("arithmetic"));
});
