// Calls that meet the messaging system mid-change are tried again instead of ending the actor. A publish
// to a subject no stream listens on yet gets "no responders" (JetStreamNotEnabled), exactly what a
// cluster answers while it elects a stream's leader; the stream appears a second later and the retried
// publish lands once. Control: with no retries the same publish fails. A plain error is not retried.
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import { startTestNats, type TestNats } from "../helpers/nats.js";
import { retryInfrastructure, isInfrastructureError } from "../../streams/infrastructure-error.js";

describe("retryInfrastructure", { timeout: 30_000 }, () => {
  let nats: TestNats;
  let nc: NatsConnection;
  before(async () => {
    nats = await startTestNats();
    nc = await connect({ servers: nats.url });
  });
  after(async () => {
    await nc?.close();
    await nats?.cleanup();
  });

  it("control: without retries a publish with no stream behind it fails as an infrastructure error", async () => {
    const js = jetstream(nc);
    await assert.rejects(
      retryInfrastructure(() => js.publish("later.a", "x", { msgID: "a" }), []),
      (e) => isInfrastructureError(e),
    );
  });

  it("a publish retried until its stream exists is stored once", async () => {
    const js = jetstream(nc);
    const jsm = await jetstreamManager(nc);
    let tries = 0;
    const created = new Promise<void>((r) =>
      setTimeout(() => {
        void jsm.streams.add({ name: "LATER", subjects: ["later.b"] }).then(() => r());
      }, 1000),
    );
    const ack = await retryInfrastructure(() => {
      tries++;
      return js.publish("later.b", "x", { msgID: "b" });
    });
    await created;
    assert.ok(tries >= 2, `it was tried ${tries} times`);
    assert.equal(ack.stream, "LATER");
    assert.equal((await jsm.streams.info("LATER")).state.messages, 1);
  });

  it("a plain error is thrown at once", async () => {
    let tries = 0;
    await assert.rejects(
      retryInfrastructure(async () => {
        tries++;
        throw new Error("bad value");
      }),
      /bad value/,
    );
    assert.equal(tries, 1);
  });
});
