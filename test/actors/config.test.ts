import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ConfigError, loadRunConfig, parseRunConfig } from "../../actors/runtime/config.js";
import { learningRate } from "../../kernels/optimizer.js";
import { toNativeLossSpec, LOSS_KIND } from "../../kernels/loss-spec.js";
import { parse as parseYaml } from "yaml";

test("a minimal config gets every default", () => {
  const c = parseRunConfig({ run: "r", environments: [{ id: "arithmetic" }] });
  assert.equal(c.rl.maxAsyncLevel, 2);
  assert.deepEqual(c.rl.loss, { name: "rl", maskLow: 0.125, maskHigh: 8, klCoef: 0 });
  assert.equal(c.model.vocabSize, 288);
  assert.equal(c.environments[0]!.weight, 1);
  assert.equal(c.sft, undefined);
});

test("a bad config is rejected with every problem listed by path", () => {
  const dir = mkdtempSync(join(tmpdir(), "rs-cfg-"));
  const path = join(dir, "bad.yaml");
  writeFileSync(
    path,
    [
      "run: 'has space'",
      "environments: []",
      "model: { hiddenSize: 100, numHeads: 3, numKvHeads: 2 }",
      "rl: { batchSize: 10, groupSize: 4, maxAsyncLevel: -1, sampling: { topP: 2 } }",
      "checkpoint: { interval: 0 }",
    ].join("\n"),
  );
  try {
    loadRunConfig(path);
    assert.fail("accepted a bad config");
  } catch (e) {
    assert.ok(e instanceof ConfigError);
    const text = e.message;
    for (const p of ["run:", "environments:", "rl.maxAsyncLevel:", "rl.sampling.topP:", "checkpoint.interval:"]) {
      assert.ok(text.includes(p), `missing ${p} in\n${text}`);
    }
    assert.ok(e.problems.length >= 5);
  }
  // Cross-field rules are reported once the shapes are valid.
  assert.throws(
    () => parseRunConfig({ run: "r", environments: [{ id: "a" }], rl: { batchSize: 10, groupSize: 4 } }),
    /rl\.batchSize: must be a multiple of rl\.groupSize/,
  );
  assert.throws(
    () => parseRunConfig({ run: "r", environments: [{ id: "a" }], model: { hiddenSize: 100, numHeads: 3 } }),
    /model\.hiddenSize: must be divisible by numHeads/,
  );
  // A path that names no file is one line (a ConfigError all the same: exit 2); one that cannot be read is a problem.
  const missing = join(dir, "missing.yaml");
  assert.throws(
    () => loadRunConfig(missing),
    (e: unknown) => e instanceof ConfigError && e.message === `no config file at ${missing}`,
  );
  assert.throws(() => loadRunConfig(dir), /invalid config .*\n {2}- cannot read file: EISDIR/);
  writeFileSync(path, "run: [unclosed");
  assert.throws(() => loadRunConfig(path), /not valid YAML/);
});

test("learning-rate schedules: warmup, constant, cosine to minLr", () => {
  const base = { lr: 1, minLr: 0.1, beta1: 0.9, beta2: 0.95, eps: 1e-8, weightDecay: 0, maxGradNorm: 1 };
  assert.equal(learningRate({ ...base, schedule: "constant", warmupSteps: 4 }, 0, 10), 0.25);
  assert.equal(learningRate({ ...base, schedule: "constant", warmupSteps: 4 }, 7, 10), 1);
  const cos = { ...base, schedule: "cosine" as const, warmupSteps: 0 };
  assert.equal(learningRate(cos, 0, 10), 1);
  assert.ok(Math.abs(learningRate(cos, 10, 10) - 0.1) < 1e-12);
  assert.ok(learningRate(cos, 5, 10) < 1 && learningRate(cos, 5, 10) > 0.1);
});

const minimal = { run: "r", environments: [{ id: "arithmetic" }] };

test("the config's rl.loss defaults are what the kernels get", () => {
  for (const raw of [minimal, { ...minimal, rl: { loss: {} } }, { ...minimal, rl: { loss: { name: "rl" } } }]) {
    const native = toNativeLossSpec(parseRunConfig(raw).rl.loss, 10);
    assert.deepEqual(native, { kind: LOSS_KIND.rl, maskLow: 0.125, maskHigh: 8, clipEps: 0, clipEpsHigh: 0, klCoef: 0, normalizer: 10 });
  }
  // ppo_clip: clipEpsHigh follows clipEps, ratio masking off ([0, Infinity]).
  const ppo = parseRunConfig({ ...minimal, rl: { loss: { name: "ppo_clip", clipEps: 0.1 } } }).rl.loss;
  assert.deepEqual(ppo, { name: "ppo_clip", clipEps: 0.1, clipEpsHigh: 0.1, maskLow: 0, maskHigh: Infinity, klCoef: 0 });
  assert.deepEqual(toNativeLossSpec(ppo, 1), {
    kind: LOSS_KIND.ppo_clip,
    maskLow: 0,
    maskHigh: Infinity,
    clipEps: 0.1,
    clipEpsHigh: 0.1,
    klCoef: 0,
    normalizer: 1,
  });
});

test("rl.loss: unknown keys are rejected by name; a valid spec (YAML .inf included) parses", () => {
  const bad: [unknown, RegExp][] = [
    [{ name: "rl", eps: 0.2 }, /rl\.loss\.eps: unknown key/],
    [{ name: "ppo_clip", clip_eps: 0.2 }, /rl\.loss\.clip_eps: unknown key/],
    [{ name: "sft", maskLow: 0.1 }, /rl\.loss\.maskLow: unknown key/],
    [{ name: "grpo" }, /rl\.loss\.name:/],
    [{ name: "rl", maskLow: 2, maskHigh: 1 }, /rl\.loss\.maskLow: must be below maskHigh/],
    [{ name: "ppo_clip", clipEps: 1 }, /rl\.loss\.clipEps:/],
  ];
  for (const [loss, re] of bad) assert.throws(() => parseRunConfig({ ...minimal, rl: { loss } }), re, JSON.stringify(loss));
  // Positive control: the same shapes with the right keys parse.
  const ok = parseRunConfig({ ...minimal, rl: { loss: { name: "ppo_clip", clipEps: 0.2, clipEpsHigh: 0.28, maskLow: 0.5, maskHigh: 2, klCoef: 0.01 } } });
  assert.deepEqual(ok.rl.loss, { name: "ppo_clip", clipEps: 0.2, clipEpsHigh: 0.28, maskLow: 0.5, maskHigh: 2, klCoef: 0.01 });
  const inf = parseRunConfig({ ...minimal, ...(parseYaml("rl: { loss: { name: rl, maskLow: 0, maskHigh: .inf } }") as object) });
  assert.deepEqual(inf.rl.loss, { name: "rl", maskLow: 0, maskHigh: Infinity, klCoef: 0 });
});

test("config check reports every problem in one pass: unknown keys with a suggestion, environments and their args, cross-field rules", async () => {
  const { checkConfigFile } = await import("../../actors/runtime/config-check.js");
  const { mkdtempSync, writeFileSync } = await import("node:fs");
  const { tmpdir } = await import("node:os");
  const { join } = await import("node:path");
  const dir = mkdtempSync(join(tmpdir(), "rs-cfgcheck-"));
  const bad = join(dir, "bad.yaml");
  writeFileSync(
    bad,
    [
      "run: check",
      "typo_field: 1",
      "modle: { hiddenSize: 64 }",
      "rl: { batchSize: 10, groupSize: 4, maxAsyncLvel: 2 }",
      "environments:",
      "  - id: nosuchenv@^9",
      "  - id: arithmetic@^1",
      "    args: { digits: 99, bogus: true }",
    ].join("\n"),
  );
  const { problems, config } = await checkConfigFile(bad);
  assert.equal(config, undefined);
  const text = problems.join("\n");
  assert.match(text, /typo_field: unknown key/);
  assert.match(text, /modle: unknown key; did you mean "model"\?/);
  assert.match(text, /rl\.maxAsyncLvel: unknown key; did you mean "maxAsyncLevel"\?/);
  assert.match(text, /rl\.batchSize: must be a multiple of rl\.groupSize/, "a cross-field rule reported with the key errors");
  assert.match(text, /environments\.0 \(nosuchenv@\^9\): .*nosuchenv/);
  assert.match(text, /environments\.1 \(arithmetic@\^1\): .*(digits|bogus)/);
  // Positive control: a good config passes with its parsed value.
  const good = join(dir, "good.yaml");
  writeFileSync(good, "run: check\nenvironments:\n  - id: arithmetic@^1\n    args: { digits: 2 }\n");
  const ok = await checkConfigFile(good);
  assert.deepEqual(ok.problems, []);
  assert.equal(ok.config?.run, "check");
});

test("config check reports a cross-field rule even when a field has a type error (zod skips refinements then)", async () => {
  const { checkConfigFile } = await import("../../actors/runtime/config-check.js");
  const dir = mkdtempSync(join(tmpdir(), "rs-cfgcross-"));
  const bad = join(dir, "bad.yaml");
  // A type error (rl.steps), a cross-field problem (10 is not a multiple of 4) and an unknown key, all at once.
  writeFileSync(bad, ["run: cross", "rl: { steps: ten, batchSize: 10, groupSize: 4, seeed: 3 }", "environments:", "  - id: arithmetic@^1"].join("\n"));
  // parseRunConfig alone stops at the type error: the schema's cross-field refinement never runs.
  assert.throws(
    () => parseRunConfig(parseYaml(readFileSync(bad, "utf8"))),
    (e: unknown) => e instanceof ConfigError && !e.problems.some((p) => p.startsWith("rl.batchSize:")),
  );
  const { problems, config } = await checkConfigFile(bad);
  assert.equal(config, undefined);
  const text = problems.join("\n");
  assert.match(text, /rl\.steps: .*expected number/, text);
  assert.match(text, /rl\.seeed: unknown key; did you mean "seed"\?/, text);
  assert.match(text, /rl\.batchSize: must be a multiple of rl\.groupSize \(4\)/, "the cross-field rule in the same pass as the type error");
  assert.equal(problems.filter((p) => p.startsWith("rl.batchSize:")).length, 1, text);

  // Without the type error the schema reports the rule itself; the check must not repeat it.
  writeFileSync(bad, ["run: cross", "rl: { batchSize: 10, groupSize: 4 }", "environments:", "  - id: arithmetic@^1"].join("\n"));
  assert.deepEqual((await checkConfigFile(bad)).problems, ["rl.batchSize: must be a multiple of rl.groupSize (4)"]);

  // A rule whose input is itself invalid is skipped: only the field error is reported.
  writeFileSync(bad, ["run: cross", "rl: { batchSize: 10, groupSize: four }", "environments:", "  - id: arithmetic@^1"].join("\n"));
  const skipped = (await checkConfigFile(bad)).problems;
  assert.equal(skipped.length, 1, skipped.join("\n"));
  assert.match(skipped[0]!, /^rl\.groupSize: /);

  // Positive control: the same config fixed has no problems.
  const good = join(dir, "good.yaml");
  writeFileSync(good, ["run: cross", "rl: { steps: 10, batchSize: 12, groupSize: 4, seed: 3 }", "environments:", "  - id: arithmetic@^1"].join("\n"));
  const ok = await checkConfigFile(good);
  assert.deepEqual(ok.problems, []);
  assert.equal(ok.config?.rl.steps, 10);
});

test("remote environments: verifiers needs server and tasks, openenv a url; a built-in takes none of their fields", () => {
  const ok = parseRunConfig({
    run: "r",
    environments: [
      { id: "verifiers:reverse-text", server: "tcp://127.0.0.1:5555", tasks: { train: "t.jsonl", eval: "e.jsonl" } },
      { id: "openenv:echo", url: "ws://127.0.0.1:8000", deadlineMs: 1000 },
      { id: "arithmetic" },
    ],
  });
  assert.equal(ok.environments[0]!.server, "tcp://127.0.0.1:5555");
  assert.equal(ok.environments[1]!.deadlineMs, 1000);
  assert.deepEqual(Object.keys(ok.environments[2]!).sort(), ["args", "id", "weight"], "a built-in's entry gains no remote fields");
  assert.throws(() => parseRunConfig({ run: "r", environments: [{ id: "verifiers:x" }] }), /needs server: tcp:\/\/host:port[\s\S]*needs tasks/);
  assert.throws(
    () => parseRunConfig({ run: "r", environments: [{ id: "verifiers:x", server: "http://h:1", tasks: { train: "a", eval: "b" } }] }),
    /a ZeroMQ address/,
  );
  assert.throws(() => parseRunConfig({ run: "r", environments: [{ id: "openenv:x" }] }), /needs url: ws:\/\/host:port/);
  assert.throws(() => parseRunConfig({ run: "r", environments: [{ id: "arithmetic", server: "tcp://h:1" }] }), /are for remote environments/);
});
