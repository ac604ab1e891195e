// A run-name typo (`inspect --run demoo`) is one line naming the run and the server asked, and a non-zero exit:
// it used to print the empty streams of whatever nats-server answered. A real nats-server holds a run "demo", so
// inspect would otherwise connect and print; the positive control inspects "demo" itself on the same server.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { connect } from "@nats-io/transport-node";
import { cliMain } from "../helpers/run-fixture.js";
import { startTestNats } from "../helpers/nats.js";
import { ensureTopology } from "../../streams/index.js";

function cli(args: string[]) {
  const env: NodeJS.ProcessEnv = { ...process.env };
  delete env["NATS_URL"];
  delete env["ROLLSTREAM_DEBUG"];
  const r = spawnSync(process.execPath, [cliMain, ...args], { env, encoding: "utf8", timeout: 30_000 });
  return { code: r.status, out: r.stdout, err: r.stderr };
}

test("inspect --run <typo>: the run does not exist on the server asked, exit 2, nothing printed", async () => {
  const nats = await startTestNats();
  const nc = await connect({ servers: nats.url });
  try {
    await ensureTopology(nc, "demo");
    const typo = cli(["inspect", "--run", "demoo", "--nats", nats.url]);
    assert.equal(typo.code, 2, typo.out + typo.err);
    assert.equal(typo.err, `inspect: run "demoo" does not exist on ${nats.url} (runs there: demo)\n`);
    assert.equal(typo.out, "");
    const subject = cli(["inspect", "--run", "demoo", "--nats", nats.url, "--subject", "rs.demoo.dlq"]);
    assert.equal(subject.code, 2, subject.out + subject.err);
    assert.match(subject.err, /^inspect: run "demoo" does not exist on /);

    // Positive control: the run that is there is inspected on the same server.
    const good = cli(["inspect", "--run", "demo", "--nats", nats.url]);
    assert.equal(good.code, 0, good.out + good.err);
    assert.match(good.out, /^stream RS_DEMO_\w+: 0 msgs/m);
    assert.equal(good.err, "");
  } finally {
    await nc.close();
    await nats.cleanup();
  }
});
