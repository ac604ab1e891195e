// `train` on a run that finished, with a config that now asks for more RL steps: one line says so and how to go
// on (a finished run is not extended). The run's state is set by hand on a real nats-server (status done at step
// 6); the positive control is the same run with the config's own rl.steps, where no such line is printed.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { stringify } from "yaml";
import { connect } from "@nats-io/transport-node";
import { Kvm } from "@nats-io/kv";
import { cliMain, tinyConfig } from "../helpers/run-fixture.js";
import { startTestNats } from "../helpers/nats.js";
import { ensureTopology, RunState, StateKeys } from "../../streams/index.js";

test("train on a finished run whose config asks for more steps says it cannot be extended, and how to go on", async () => {
  const dir = mkdtempSync(join(tmpdir(), "rs-train-done-"));
  const nats = await startTestNats();
  const nc = await connect({ servers: nats.url });
  try {
    const t = await ensureTopology(nc, "fin");
    const state = new RunState(await new Kvm(nc).open(t.names.kvBucket));
    await state.put(StateKeys.runStatus, "done");
    await state.put(StateKeys.learnerStep, 6);
    const train = (steps: number) => {
      const cfg = join(dir, `fin-${steps}.yaml`);
      writeFileSync(cfg, stringify(tinyConfig("fin", dir, { rl: { ...(tinyConfig("fin", dir).rl as object), steps } })));
      const env: NodeJS.ProcessEnv = { ...process.env };
      delete env["NATS_URL"];
      const r = spawnSync(process.execPath, [cliMain, "train", cfg, "--nats", nats.url, "--no-dashboard", "--no-eval"], {
        env,
        encoding: "utf8",
        timeout: 60_000,
      });
      return { code: r.status, out: r.stdout, err: r.stderr };
    };
    const more = train(10);
    assert.equal(more.code, 0, more.out + more.err);
    assert.match(more.out, /^run fin already finished/m);
    const hint = more.out.split("\n").filter((l) => l.includes("rl.steps"));
    assert.deepEqual(hint, [
      "the config now asks for rl.steps 10 but run fin finished at step 6: a finished run cannot be extended; start it over with --fresh, or give the longer run another name (run:)",
    ]);

    // Positive control: the same finished run, the config asking for the steps it did: no hint.
    const same = train(6);
    assert.equal(same.code, 0, same.out + same.err);
    assert.match(same.out, /^run fin already finished/m);
    assert.doesNotMatch(same.out, /rl\.steps/);
  } finally {
    await nc.close();
    await nats.cleanup();
    rmSync(dir, { recursive: true, force: true });
  }
});
