// `rollstream dashboard` started wrong ends at once with one line and a non-zero exit: a port that is taken
// (it used to print EADDRINUSE and never exit: its NATS connection kept it up), and a run the server does not
// have (it used to serve an empty page of whatever nats-server answered). A real nats-server holds a run
// "demo", so the dashboard would otherwise connect and serve; the positive control starts on a free port.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { createServer, type Server } from "node:net";
import { connect } from "@nats-io/transport-node";
import { cliMain } from "../helpers/run-fixture.js";
import { startTestNats } from "../helpers/nats.js";
import { ensureTopology } from "../../streams/index.js";

/** Runs the dashboard until it exits or `ms` pass (then it is killed): exit code, output, time taken. */
function dashboard(args: string[], ms: number, natsUrl: string): Promise<{ code: number | null; stdout: string; stderr: string; ms: number; killed: boolean }> {
  const env: NodeJS.ProcessEnv = { ...process.env, NATS_URL: natsUrl };
  delete env["ROLLSTREAM_DEBUG"];
  const start = Date.now();
  const child = spawn(process.execPath, [cliMain, "dashboard", ...args], { env, stdio: ["ignore", "pipe", "pipe"] });
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (d: Buffer) => (stdout += d.toString()));
  child.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
  let killed = false;
  const timer = setTimeout(() => {
    killed = true;
    child.kill("SIGKILL");
  }, ms);
  return new Promise((resolve) =>
    child.once("exit", (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr, ms: Date.now() - start, killed });
    }),
  );
}

test("dashboard: a taken port and an unknown run are one line and a non-zero exit", async () => {
  const nats = await startTestNats();
  const nc = await connect({ servers: nats.url });
  const blocker: Server = createServer();
  try {
    await ensureTopology(nc, "demo");
    await new Promise<void>((r) => blocker.listen({ host: "127.0.0.1", port: 0 }, r));
    const taken = (blocker.address() as { port: number }).port;

    const busy = await dashboard(["--run", "demo", "--port", String(taken)], 20_000, nats.url);
    assert.ok(!busy.killed, `the dashboard exited by itself (it ran ${busy.ms} ms): ${busy.stdout}${busy.stderr}`);
    assert.equal(busy.code, 1, busy.stderr);
    assert.equal(busy.stderr, `dashboard: port ${taken} on 127.0.0.1 is in use (another dashboard?): pick another with --port, or --port 0 for any free one\n`);

    const typo = await dashboard(["--run", "demoo", "--port", "0"], 20_000, nats.url);
    assert.ok(!typo.killed, `the dashboard exited by itself (it ran ${typo.ms} ms): ${typo.stdout}${typo.stderr}`);
    assert.equal(typo.code, 2, typo.stderr);
    assert.equal(typo.stderr, `dashboard: run "demoo" does not exist on ${nats.url} (runs there: demo)\n`);
    assert.equal(typo.stdout, "", "nothing was served");

    // Positive control: the same server, the real run, a free port: the dashboard serves (then Ctrl-C).
    const env: NodeJS.ProcessEnv = { ...process.env, NATS_URL: nats.url };
    const good = spawn(process.execPath, [cliMain, "dashboard", "--run", "demo", "--port", "0"], { env, stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    good.stdout.on("data", (d: Buffer) => (out += d.toString()));
    good.stderr.on("data", (d: Buffer) => (out += d.toString()));
    const exited = new Promise<number | null>((r) => good.once("exit", r));
    const deadline = Date.now() + 20_000;
    while (!/dashboard of run demo: http:\/\/127\.0\.0\.1:\d+/.test(out) && good.exitCode === null && Date.now() < deadline)
      await new Promise((r) => setTimeout(r, 100));
    assert.match(out, /dashboard of run demo: http:\/\/127\.0\.0\.1:\d+/);
    good.kill("SIGINT");
    assert.equal(await exited, 0, out);
  } finally {
    blocker.close();
    await nc.close();
    await nats.cleanup();
  }
});
