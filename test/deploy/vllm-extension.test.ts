// deploy/vllm (the worker extension and the launcher that give vLLM a full-weight reload route) cannot run here: no
// GPU build of vLLM, no PyPI. What is checked without it: both files compile under Python 3; the launcher's ROUTES
// table (read from its source with Python's ast, nothing of it imported) holds exactly the requests
// VllmServer.loadWeights sends — method, path, query and body field names, recorded from the client itself on a
// plain HTTP listener — for every pause mode the config allows; and the names that tie the two Python files together
// (the extension's qualified name, the worker method the launcher calls, a handler per row) exist. The controls: a
// table with a misspelt path or body field, and a file with a syntax error, are caught by the same checks. The one
// part of the worker that needs neither torch nor vLLM, which files of a folder it reads, runs here for real on a
// folder the fleet's own exporter wrote and on a sharded one.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { HfExporter } from "../../actors/inference/fleet/hf-export.js";
import { VllmServer } from "../../actors/inference/fleet/vllm.js";
import { FleetSchema } from "../../actors/runtime/config.js";

const repo = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
const dir = join(repo, "deploy", "vllm");
const LAUNCHER = join(dir, "serve.py");
const WORKER = join(dir, "rollstream_worker.py");
/** Debian's python3; a pyenv shim earlier on PATH may be another version. */
const PYTHON = existsSync("/usr/bin/python3") ? "/usr/bin/python3" : "python3";

interface Route {
  name: string;
  method: string;
  path: string;
  query: string[];
  body: string[];
  install: "always" | "if_absent";
}
interface Sent {
  method: string;
  path: string;
  query: string[];
  body: string[];
}

/** -B: no __pycache__ left in deploy/vllm by the import below. */
function python(script: string, ...args: string[]): { status: number | null; stdout: string; stderr: string } {
  return spawnSync(PYTHON, ["-B", "-c", script, ...args], { encoding: "utf8", timeout: 60_000 });
}

/** py_compile into a scratch folder (no __pycache__ in the repository); the error text, or null. */
function compileError(file: string): string | null {
  const out = mkdtempSync(join(tmpdir(), "pyc-"));
  try {
    const r = python("import py_compile, sys; py_compile.compile(sys.argv[1], cfile=sys.argv[2], doraise=True)", file, join(out, "x.pyc"));
    return r.status === 0 ? null : r.stderr || `exit ${r.status}`;
  } finally {
    rmSync(out, { recursive: true, force: true });
  }
}

/** The launcher's module-level literals and the classes of the worker file, read with ast (vLLM is not imported). */
function pythonFacts(): {
  routes: Route[];
  extension: string;
  workerMethod: string;
  pauseModes: string[];
  handlers: string[];
  classes: Record<string, string[]>;
} {
  const script = `
import ast, json, sys
def module(path):
    with open(path, encoding="utf-8") as f:
        return ast.parse(f.read(), path)
launcher, worker = module(sys.argv[1]), module(sys.argv[2])
facts = {}
for node in launcher.body:
    if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
        name = node.targets[0].id
        if name in ("ROUTES", "EXTENSION", "WORKER_METHOD", "PAUSE_MODES"):
            facts[name] = ast.literal_eval(node.value)
        if name == "HANDLERS":
            facts[name] = [k.value for k in node.value.keys]
facts["classes"] = {c.name: [f.name for f in c.body if isinstance(f, ast.FunctionDef)] for c in worker.body if isinstance(c, ast.ClassDef)}
print(json.dumps(facts))
`;
  const r = python(script, LAUNCHER, WORKER);
  assert.equal(r.status, 0, r.stderr);
  const f = JSON.parse(r.stdout) as {
    ROUTES: Route[];
    EXTENSION: string;
    WORKER_METHOD: string;
    PAUSE_MODES: string[];
    HANDLERS: string[];
    classes: Record<string, string[]>;
  };
  return { routes: f.ROUTES, extension: f.EXTENSION, workerMethod: f.WORKER_METHOD, pauseModes: f.PAUSE_MODES, handlers: f.HANDLERS, classes: f.classes };
}

/** Runs the client's full-weight update against a listener that answers 200 {} and records what it was sent. */
async function sentByClient(pauseMode: "abort" | "wait" | "keep", weightsRoute: string): Promise<Sent[]> {
  const sent: Sent[] = [];
  const server = http.createServer((req, res) => {
    let text = "";
    req.on("data", (c: Buffer) => (text += c.toString("utf8")));
    req.on("end", () => {
      const url = new URL(req.url ?? "/", "http://x");
      const body = text === "" ? {} : (JSON.parse(text) as Record<string, unknown>);
      sent.push({ method: req.method ?? "", path: url.pathname, query: [...url.searchParams.keys()].sort(), body: Object.keys(body).sort() });
      res.writeHead(200, { "content-type": "application/json" }).end("{}");
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  try {
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    await new VllmServer(url, { pauseMode, weightsRoute }).loadWeights("/shared/run/v3", 3, { deadlineMs: 10_000 });
  } finally {
    server.closeAllConnections();
    await new Promise((r) => server.close(r));
  }
  return sent;
}

/** Every request the client sent has a row with its method, path, query and body fields, and every row was used. */
function mismatches(routes: Route[], sent: Sent[]): string[] {
  const out: string[] = [];
  for (const s of sent) {
    const row = routes.find((r) => r.method === s.method && r.path === s.path);
    if (!row) {
      out.push(`the client sends ${s.method} ${s.path}; ROUTES has no such route`);
      continue;
    }
    if ([...row.query].sort().join() !== s.query.join()) out.push(`${s.path}: query ${s.query} sent, ${row.query} served`);
    if ([...row.body].sort().join() !== s.body.join()) out.push(`${s.path}: body {${s.body}} sent, {${row.body}} served`);
  }
  for (const r of routes)
    if (!sent.some((s) => s.method === r.method && s.path === r.path)) out.push(`ROUTES serves ${r.method} ${r.path}, which the client never calls`);
  return out;
}

const pauseModes = FleetSchema.shape.vllmPauseMode.unwrap().options;
const defaultRoute = FleetSchema.parse({}).vllmWeightsRoute;

test("deploy/vllm: both Python files compile; a syntax error is caught (the control)", () => {
  assert.equal(compileError(LAUNCHER), null);
  assert.equal(compileError(WORKER), null);
  const scratch = mkdtempSync(join(tmpdir(), "vllm-ext-"));
  try {
    const broken = join(scratch, "serve.py");
    writeFileSync(broken, readFileSync(LAUNCHER, "utf8").replace("def add_routes(app)", "def add_routes(app"));
    assert.match(compileError(broken) ?? "", /SyntaxError|was never closed/);
  } finally {
    rmSync(scratch, { recursive: true, force: true });
  }
});

test("deploy/vllm: the launcher's ROUTES are exactly what VllmServer.loadWeights sends, for every pause mode", async () => {
  const facts = pythonFacts();
  assert.deepEqual([...facts.pauseModes].sort(), [...pauseModes].sort(), "the launcher's /pause takes the modes the config allows");
  for (const mode of pauseModes) {
    const sent = await sentByClient(mode, defaultRoute);
    assert.deepEqual(
      sent.map((s) => `${s.method} ${s.path}`),
      ["POST /pause", `POST ${defaultRoute}`, "POST /update_weight_version", "POST /resume"],
      "the client's sequence (a different one needs a new look at serve.py)",
    );
    assert.deepEqual(mismatches(facts.routes, sent), [], `pauseMode ${mode}`);
  }
  assert.equal(facts.routes.find((r) => r.name === "weights")?.install, "always", "the reload route wins over dev mode's /update_weights");
});

test("deploy/vllm: the control: a misspelt route or body field in the table is reported", async () => {
  const { routes } = pythonFacts();
  const sent = await sentByClient("abort", defaultRoute);
  const renamed = routes.map((r) => (r.name === "weights" ? { ...r, path: "/update_weight" } : r));
  assert.deepEqual(mismatches(renamed, sent), [
    `the client sends POST ${defaultRoute}; ROUTES has no such route`,
    "ROUTES serves POST /update_weight, which the client never calls",
  ]);
  const field = routes.map((r) => (r.name === "weights" ? { ...r, body: ["weights_dir"] } : r));
  assert.deepEqual(mismatches(field, sent), [`${defaultRoute}: body {weight_dir} sent, {weights_dir} served`]);
  const query = routes.map((r) => (r.name === "pause" ? { ...r, query: [] } : r));
  assert.deepEqual(mismatches(query, sent), ["/pause: query mode sent,  served"]);
});

test("deploy/vllm: the launcher names an extension class that has the worker method it calls, and a handler per route", () => {
  const facts = pythonFacts();
  const [module, cls] = facts.extension.split(".");
  assert.equal(`${module}.py`, "rollstream_worker.py", "EXTENSION's module is the worker file of deploy/vllm");
  assert.ok(facts.classes[cls!], `rollstream_worker.py defines ${cls}`);
  assert.ok(facts.classes[cls!]!.includes(facts.workerMethod), `${cls} defines ${facts.workerMethod}`);
  assert.match(facts.workerMethod, /^rollstream_/, "a prefix no vLLM worker attribute has (vLLM refuses an extension that shadows one)");
  assert.deepEqual([...facts.handlers].sort(), facts.routes.map((r) => r.name).sort());
});

/** rollstream_worker.safetensors_files(folder) run by Python: the file names it reads, or its error. */
function filesOf(folder: string): { files?: string[]; error?: string } {
  const script = `
import json, os, sys
sys.path.insert(0, sys.argv[1])
import rollstream_worker
try:
    print(json.dumps({"files": [os.path.basename(p) for p in rollstream_worker.safetensors_files(sys.argv[2])]}))
except (OSError, ValueError) as e:
    print(json.dumps({"error": f"{type(e).__name__}: {e}"}))
`;
  const r = python(script, dir, folder);
  assert.equal(r.status, 0, r.stderr);
  return JSON.parse(r.stdout) as { files?: string[]; error?: string };
}

test("deploy/vllm: the worker reads the folder the fleet exports, every shard an index names, and refuses a folder without weights", () => {
  const scratch = mkdtempSync(join(tmpdir(), "vllm-ext-"));
  try {
    const exported = new HfExporter(join(scratch, "hf"), "{}", undefined, 2).write(3, new Uint8Array(16));
    assert.deepEqual(filesOf(exported), { files: ["model.safetensors"] });
    const sharded = join(scratch, "sharded");
    mkdirSync(sharded);
    const map = {
      "a.weight": "model-00002-of-00002.safetensors",
      "b.weight": "model-00001-of-00002.safetensors",
      "c.weight": "model-00002-of-00002.safetensors",
    };
    writeFileSync(join(sharded, "model.safetensors.index.json"), JSON.stringify({ metadata: {}, weight_map: map }));
    writeFileSync(join(sharded, "model-00001-of-00002.safetensors"), "");
    assert.match(filesOf(sharded).error ?? "", /FileNotFoundError: .*names shards that are not there: .*model-00002-of-00002/, "the control: a shard missing");
    writeFileSync(join(sharded, "model-00002-of-00002.safetensors"), "");
    assert.deepEqual(filesOf(sharded), { files: ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"] });
    const empty = join(scratch, "empty");
    mkdirSync(empty);
    writeFileSync(join(empty, "config.json"), "{}");
    assert.match(filesOf(empty).error ?? "", /FileNotFoundError: .*no model\.safetensors/);
  } finally {
    rmSync(scratch, { recursive: true, force: true });
  }
});
