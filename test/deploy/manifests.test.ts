// deploy/k8s against the Kubernetes API schemas (kubernetes-models validates each object with the
// OpenAPI schema of its kind), every actor of the registry deployed with a command the CLI has, and the
// image built by the repository's Dockerfile. The control: the same validator rejects a broken copy.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parseAllDocuments } from "yaml";
import { ACTORS } from "../../actors/registry.js";

const repo = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
const k8s = join(repo, "deploy", "k8s");

type Manifest = { apiVersion: string; kind: string; metadata?: { name?: string }; spec?: Record<string, unknown> };

function manifests(): { file: string; doc: Manifest }[] {
  const out: { file: string; doc: Manifest }[] = [];
  for (const file of readdirSync(k8s).filter((f) => f.endsWith(".yaml"))) {
    for (const d of parseAllDocuments(readFileSync(join(k8s, file), "utf8"))) {
      assert.equal(d.errors.length, 0, `${file}: ${d.errors.map((e) => e.message).join("; ")}`);
      const doc = d.toJS() as Manifest | null;
      if (doc) out.push({ file, doc });
    }
  }
  return out;
}

/** Validates with the model class of the object's apiVersion and kind (core "v1" or "<group>/<version>"). */
async function validate(doc: Manifest): Promise<void> {
  const path = `${doc.apiVersion}/${doc.kind}`; // "v1/Service", "apps/v1/Deployment"
  const mod = (await import(`kubernetes-models/${path}`)) as Record<string, new (o: unknown) => { validate(): void }>;
  const Model = mod[doc.kind];
  assert.ok(Model, `kubernetes-models has no ${doc.apiVersion} ${doc.kind}`);
  new Model(doc).validate();
}

const containers = (doc: Manifest) =>
  (doc.spec?.["template"] as { spec?: { containers?: { name: string; image: string; args?: string[] }[] } } | undefined)?.spec?.containers ?? [];

test("every manifest under deploy/k8s validates against its Kubernetes schema", async () => {
  const all = manifests();
  assert.ok(all.length >= 10, `found ${all.length} objects`);
  for (const { file, doc } of all) {
    await validate(doc).catch((e: Error) => assert.fail(`${file}: ${doc.kind} ${doc.metadata?.name}: ${e.message}`));
  }
});

test("the control: a broken copy of a manifest is rejected", async () => {
  const learner = manifests().find(({ doc }) => doc.metadata?.name === "rollstream-learner")!.doc;
  const broken = structuredClone(learner);
  (broken.spec as { replicas: unknown }).replicas = "one";
  await assert.rejects(validate(broken), /replicas must be integer/);
  const noSelector = structuredClone(learner);
  delete (noSelector.spec as { selector?: unknown }).selector;
  await assert.rejects(validate(noSelector), /selector/);
});

test("every actor is deployed, runs `rollstream actor <name>` from the Dockerfile's image, and needs a config unless it is the sandbox", () => {
  const deployed = new Map<string, string[]>();
  for (const { doc } of manifests()) {
    for (const c of containers(doc)) {
      if (c.image !== "ROLLSTREAM_IMAGE") continue;
      // rollstream serve replicas: the run's model from its config, bound to every address on the port they expose.
      if (c.args?.[0] === "serve") {
        assert.deepEqual(c.args.slice(1, 3), ["--config", "/config/run.yaml"], `${doc.metadata?.name} serves the run's model`);
        assert.equal(c.args[c.args.indexOf("--host") + 1], "0.0.0.0");
        continue;
      }
      assert.equal(c.args?.[0], "actor", `${doc.metadata?.name} runs an actor`);
      deployed.set(c.args![1]!, c.args!);
    }
  }
  assert.deepEqual([...deployed.keys()].sort(), Object.keys(ACTORS).sort());
  for (const [name, args] of deployed) assert.equal(args.includes("--config"), name !== "sandbox", `${name}: ${args.join(" ")}`);
  const dockerfile = readFileSync(join(repo, "Dockerfile"), "utf8");
  assert.match(dockerfile, /^FROM node:20-bookworm/m, "a Debian base with the Node the README names");
  for (const pkg of ["nats-server", "bubblewrap", "python3", "libopenblas0-pthread"]) assert.match(dockerfile, new RegExp(`\\b${pkg}\\b`));
  assert.match(dockerfile, /RUN npm ci\b/, "the project is built in the image");
  assert.match(dockerfile, /^ENTRYPOINT \["node", "\/opt\/rollstream\/bin\/rollstream\.js"\]/m, "manifests pass CLI args to rollstream");
});

test("the serve fleet: each server its own address (StatefulSet behind a headless Service), the weights volume shared with the inference actor", () => {
  const all = manifests().filter(({ file }) => file === "serve.yaml" || file === "sglang.yaml");
  for (const name of ["rollstream-serve", "sglang"]) {
    const svc = all.find(({ doc }) => doc.kind === "Service" && doc.metadata?.name === name)!.doc;
    const set = all.find(({ doc }) => doc.kind === "StatefulSet" && doc.metadata?.name === name)!.doc;
    assert.equal(svc.spec?.["clusterIP"], "None", `${name}: a headless Service (one address per pod)`);
    assert.equal(set.spec?.["serviceName"], name);
    const port = (svc.spec?.["ports"] as { port: number }[])[0]!.port;
    const c = containers(set)[0]! as { args?: string[]; ports?: { containerPort: number }[]; volumeMounts?: { name: string; mountPath: string }[] };
    assert.equal(c.ports?.[0]?.containerPort, port);
    assert.ok(c.volumeMounts?.some((v) => v.mountPath === "/weights"), `${name} reads the exported versions`);
  }
  const inference = all.find(({ doc }) => doc.kind === "Deployment" && doc.metadata?.name === "rollstream-inference")!.doc;
  const mounts = (containers(inference)[0] as { volumeMounts?: { mountPath: string }[] }).volumeMounts ?? [];
  assert.ok(mounts.some((m) => m.mountPath === "/weights"), "the inference actor writes the versions the servers load");
});
