// The attempt ledger rides out a KV call that times out because a process was stopped mid-call (here the
// server: SIGSTOP for longer than the call's timeout, then SIGCONT). Positive control: the same stop with
// a single try fails with the timeout the ledger used to die of.
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { connect, TimeoutError, type NatsConnection } from "@nats-io/transport-node";
import { jetstream } from "@nats-io/jetstream";
import { Kvm, type KV } from "@nats-io/kv";
import { startTestNats, stopProcess, type TestNats } from "../helpers/nats.js";
import { AttemptLedger } from "../../streams/attempt-ledger.js";
import { retryInfrastructure } from "../../streams/infrastructure-error.js";

const CALL_TIMEOUT_MS = 300;

describe("attempt ledger: KV calls that time out", { timeout: 30_000 }, () => {
  let nats: TestNats;
  let nc: NatsConnection;
  let kv: KV;
  before(async () => {
    nats = await startTestNats();
    nc = await connect({ servers: nats.url });
    kv = await new Kvm(jetstream(nc, { timeout: CALL_TIMEOUT_MS })).create("rs-t-attempts", { history: 1 });
  });
  after(async () => {
    if (nats?.process.pid) process.kill(nats.process.pid, "SIGCONT");
    await nc?.close();
    await nats?.cleanup();
  });

  /** Stops the server, runs `call`, continues the server after `stoppedMs`; what the call gave. */
  async function withServerStopped<T>(stoppedMs: number, call: () => Promise<T>): Promise<T> {
    const pid = nats.process.pid!;
    await stopProcess(pid);
    const p = call();
    p.catch(() => undefined);
    await new Promise((r) => setTimeout(r, stoppedMs));
    process.kill(pid, "SIGCONT");
    return p;
  }

  it("control: one try of a get times out while the server is stopped", async () => {
    await assert.rejects(
      withServerStopped(CALL_TIMEOUT_MS + 200, () => retryInfrastructure(() => kv.get("learner.x"), [])),
      (e) => e instanceof TimeoutError,
    );
  });

  it("begin, unfinished and end go on once the server answers again", async () => {
    const ledger = new AttemptLedger(async () => kv, "learner");
    const prior = await withServerStopped(CALL_TIMEOUT_MS + 200, () => ledger.begin("step-7", "learner-0", "step 7"));
    assert.equal(prior, 0);
    assert.equal(await withServerStopped(CALL_TIMEOUT_MS + 200, () => ledger.unfinished("step-7")), 1, "begin was recorded once");
    await withServerStopped(CALL_TIMEOUT_MS + 200, () => ledger.end("step-7"));
    assert.equal(await ledger.unfinished("step-7"), 0);
  });

  it("a call that keeps timing out still fails, after its tries", async () => {
    const t0 = Date.now();
    await assert.rejects(
      withServerStopped(CALL_TIMEOUT_MS * 3 + 300, () => retryInfrastructure(() => kv.get("learner.y"), [0])),
      (e) => e instanceof TimeoutError,
    );
    assert.ok(Date.now() - t0 >= CALL_TIMEOUT_MS * 2 - 50, "both tries ran");
  });
});
