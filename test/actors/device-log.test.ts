// `model.device: auto` says which kernel backend it chose and why (docs promise it): the actors pass their
// logger to createPolicyModel, which logs one line with the device and the reason.
import { test } from "node:test";
import assert from "node:assert/strict";
import { RunConfigSchema } from "../../actors/runtime/config.js";
import { createPolicyModel } from "../../actors/runtime/model-factory.js";
import { tinyConfig } from "../helpers/run-fixture.js";

function logged(device: "auto" | "cpu"): Array<{ obj: Record<string, unknown>; msg: string }> {
  const raw = tinyConfig("dev", "/tmp/unused") as { model: Record<string, unknown> };
  const config = RunConfigSchema.parse({ ...raw, model: { ...raw.model, device } });
  const lines: Array<{ obj: Record<string, unknown>; msg: string }> = [];
  const model = createPolicyModel(config, { threads: 1, log: { info: (obj, msg) => lines.push({ obj: obj as Record<string, unknown>, msg }) } });
  model.dispose?.();
  return lines;
}

test("device auto: one line names the backend chosen and why", () => {
  const lines = logged("auto");
  assert.equal(lines.length, 1);
  const { obj, msg } = lines[0]!;
  assert.equal(obj.requested, "auto");
  assert.match(String(obj.why), /^auto: (using the CPU \(.+\)|CUDA backend built and a GPU is visible)$/);
  assert.match(msg, /^kernel backend: (cpu|cuda) \(auto: .+\)$/);
  if (obj.device === "cpu") assert.match(String(obj.why), /not built|GPU|CUDA|cuda/i, "says why not CUDA");
});

test("device cpu: the line says it was requested (control: the reason follows the request)", () => {
  const [line] = logged("cpu");
  assert.equal(line!.obj.device, "cpu");
  assert.equal(line!.obj.why, 'device "cpu" requested');
});
