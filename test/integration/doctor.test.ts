// `rollstream doctor` against a real run: healthy while every actor heartbeats; each actor in turn stopped
// with SIGSTOP is named silent within seconds of its last heartbeat (exit 1), and healthy again once it
// continues; after the run finished and its actors drained, the run is healthy with nothing live left.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { startRun, cliMain, waitUntil } from "../helpers/run-fixture.js";
import { StateKeys } from "../../streams/index.js";

interface DoctorInstance {
  actor: string;
  instance: string;
  verdict: string;
  state?: string;
  what?: string;
  heartbeatAgeMs: number;
  engine?: { kvBlocksUsed: number; kvBlocksCached: number; kvBlocksFree: number };
}
interface DoctorReport {
  status: string | null;
  healthy: boolean;
  problems: string[];
  instances: DoctorInstance[];
  consumers: { consumer: string }[];
  idle: { actor: string; busyMs: number; idle: Record<string, number> }[];
}

/** Stale after 5 s: well past the 2 s heartbeat interval on a loaded machine, well within the 10 s asked of it. */
const STALE_MS = 5000;

interface DoctorRun {
  code: number;
  report: DoctorReport | null;
  out: string;
}

function doctor(url: string, run: string): Promise<DoctorRun> {
  return new Promise((resolve) => {
    execFile(process.execPath, [cliMain, "doctor", "--run", run, "--nats", url, "--json", "--stale-ms", String(STALE_MS)], (err, stdout, stderr) => {
      const code = err ? Number(err.code ?? 1) : 0;
      let report: DoctorReport | null = null;
      try {
        report = JSON.parse(stdout) as DoctorReport;
      } catch {
        // reported through `out`
      }
      resolve({ code, report, out: stdout + stderr });
    });
  });
}

// The three that exit when the run is done (the evaluator once it evaluated the final version) go first.
// The sandbox actor serves any run; it runs here although arithmetic does not call it, to take its turn.
const ACTORS = ["orchestrator", "learner", "evaluator", "inference", "reward", "checkpoint", "sandbox"] as const;

test("doctor: healthy run, each stopped actor named silent within seconds, healthy again after it continues and after the run", async () => {
  const run = await startRun(
    "doctor",
    {
      // Long enough that the orchestrator and the learner (which exit when the run is done) are still there
      // for their turn; a stopped actor stalls the run, so the steps take no longer than that.
      rl: { steps: 200, batchSize: 8, groupSize: 4, maxAsyncLevel: 1, maxOffPolicySteps: 2, sampling: { temperature: 1, topP: 1, topK: 0, maxTokens: 4 } },
      checkpoint: { interval: 10, keepLast: 2, keepVersions: 2 },
    },
    {
      // As `train` does: an actor stopped in the middle of a request may find its timer expired when it
      // continues and exit; its launcher starts it again (what doctor shows then is what this test checks).
      maxRestarts: 3,
    },
  );
  const logs = `${run.dir}/logs`;
  const url = run.nats.url;
  try {
    for (const name of ["checkpoint", "learner", "orchestrator", "reward", "inference", "evaluator", "sandbox"]) run.launcher.start({ name, replica: 0 });
    // What the latest doctor run said (a holder: assignments inside waitUntil's callbacks are not narrowed).
    const seen: { last?: DoctorRun } = {};
    // Positive control: every actor heartbeating, RL under way, doctor exits 0.
    await waitUntil(
      "a healthy run with every actor heartbeating",
      async () => {
        if ((await run.state.learnerStep()) < 1) return false;
        seen.last = await doctor(url, "doctor");
        const instances = seen.last.report?.instances ?? [];
        // The engine's figures join inference's heartbeat once its engine is open: a heartbeat written just before
        // that has none yet (the race this waits out; the assertion below still needs them).
        const engineReported = instances.some((i) => i.actor === "inference" && i.engine !== undefined);
        return seen.last.code === 0 && engineReported && instances.filter((i) => i.verdict === "healthy").length === ACTORS.length;
      },
      60_000,
      logs,
    );
    const healthy = seen.last!.report!;
    assert.equal(healthy.healthy, true, seen.last!.out);
    assert.deepEqual(healthy.problems, []);
    assert.deepEqual(healthy.instances.map((i) => i.actor).sort(), [...ACTORS].sort());
    assert.deepEqual(healthy.consumers.map((c) => c.consumer).sort(), ["checkpoint", "inference", "reward"]);
    // The inference engine's scheduler figures travel in its heartbeat.
    const engine = healthy.instances.find((i) => i.actor === "inference")?.engine;
    assert.ok(engine && engine.kvBlocksUsed + engine.kvBlocksCached + engine.kvBlocksFree > 0, JSON.stringify(engine));

    for (const name of ACTORS) {
      const pid = run.launcher.pid(name);
      assert.ok(pid, `${name} is running`);
      // These two exit when the run is done: their turn must come while it runs.
      if (name === "orchestrator" || name === "learner" || name === "evaluator")
        assert.notEqual(await run.state.get(StateKeys.runStatus), "done", `the run outlived ${name}'s turn`);
      process.kill(pid, "SIGSTOP");
      try {
        let named: DoctorInstance | undefined;
        await waitUntil(
          `doctor names ${name} silent`,
          async () => {
            seen.last = await doctor(url, "doctor");
            named = seen.last.report?.instances.find((i) => i.actor === name && i.verdict === "silent");
            return named !== undefined;
          },
          15_000,
          logs,
        );
        const silent = seen.last!;
        assert.equal(silent.code, 1, silent.out);
        assert.equal(silent.report!.healthy, false);
        assert.ok(named!.heartbeatAgeMs < 10_000, `${name} named silent ${named!.heartbeatAgeMs} ms after its last heartbeat`);
        assert.ok(
          silent.report!.problems.some((p) => p.startsWith(`${name}-0 silent: no heartbeat for`)),
          silent.report!.problems.join("\n"),
        );
      } finally {
        process.kill(pid, "SIGCONT");
      }
      await waitUntil(
        `${name} heartbeating again (or done)`,
        async () => {
          seen.last = await doctor(url, "doctor");
          const verdict = seen.last.report?.instances.find((i) => i.actor === name)?.verdict;
          // The learner and the orchestrator may finish the run the moment they continue.
          return verdict === "healthy" || verdict === "exited";
        },
        15_000,
        logs,
      );
    }

    await waitUntil("run done", async () => (await run.state.get(StateKeys.runStatus)) === "done", 90_000, logs);
    await run.launcher.stopAll(10_000);
    const final = await doctor(url, "doctor");
    assert.equal(final.code, 0, final.out);
    assert.equal(final.report!.status, "done");
    assert.deepEqual(final.report!.problems, []);
    // Every actor drained and said goodbye: no live key is left, only the final accounting.
    assert.deepEqual(final.report!.instances.map((i) => `${i.actor}:${i.verdict}`).sort(), ACTORS.map((a) => `${a}:exited`).sort());
    // The idle ratios say what each actor waited on.
    const idle = Object.fromEntries(final.report!.idle.map((s) => [s.actor, s]));
    assert.ok(idle.learner!.idle.samples! > 0, JSON.stringify(idle.learner));
    assert.ok(idle.inference!.idle.tasks! > 0, JSON.stringify(idle.inference));
    assert.ok(idle.reward!.idle["rollouts.raw"]! > 0, JSON.stringify(idle.reward));
  } finally {
    await run.close();
  }
});
