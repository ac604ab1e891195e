// The NATS client's failure handling against a real nats-server: no service at all, a replica that
// swallows a request and disappears, and a replica that comes up while the client is retrying. On an
// actor's connection (connectNats: no async stack traces, so timeouts and no-responders are built without
// the request's stack) and on a plain one: the retries must tell a lost replica the same way on both.
import { after, before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { pino } from "pino";
import { startTestNats, type TestNats } from "../../test/helpers/nats.js";
import { connectNats } from "../../actors/runtime/nats-connect.js";
import { NatsSandboxClient, SandboxServiceError } from "../../streams/sandbox-client.js";
import { SANDBOX_QUEUE_GROUP, SandboxSubjects } from "../../streams/sandbox-protocol.js";
import { startSandboxService, type SandboxServiceHandle } from "../index.js";

let nats: TestNats;

before(async () => {
  nats = await startTestNats();
});
after(async () => {
  await nats?.cleanup();
});

const connections: [string, (url: string) => Promise<NatsConnection>, boolean][] = [
  ["an actor's connection", (url) => connectNats(url, "test-sandbox-client"), true],
  ["a plain connection", (url) => connect({ servers: url }), false],
];

for (const [kind, open, noAsyncTraces] of connections)
  describe(`NatsSandboxClient on ${kind}`, { timeout: 60_000 }, () => {
    let nc: NatsConnection;
    before(async () => {
      nc = await open(nats.url);
      // The connection is the kind this round claims to test.
      assert.equal((nc as unknown as { options: { noAsyncTraces?: boolean } }).options.noAsyncTraces === true, noAsyncTraces);
    });
    after(async () => {
      await nc?.close();
    });

    it("validates options and requests before sending", async () => {
      assert.throws(() => new NatsSandboxClient(nc, { retries: -1 }), /retries/);
      assert.throws(() => new NatsSandboxClient(nc, { timeoutMs: 0 }), /timeoutMs/);
      const c = new NatsSandboxClient(nc);
      await assert.rejects(c.exec({ language: "ruby" as "python", code: "1" }), /invalid sandbox request: language/);
      await assert.rejects(c.exec({ language: "python", code: "1", files: { "/etc/passwd": "x" } }), /relative/);
    });

    it("fails with 503 when no sandbox service runs, after its retries", async () => {
      const c = new NatsSandboxClient(nc, { retries: 2, timeoutMs: 1000 });
      const t0 = Date.now();
      const err = await c.exec({ language: "python", code: "print(1)" }).catch((e: unknown) => e);
      assert.ok(err instanceof SandboxServiceError && err.code === 503, String(err));
      assert.match((err as Error).message, /3 attempt\(s\): no sandbox service is running/);
      assert.ok(Date.now() - t0 >= 300, "it backed off between attempts");
      // openSession still returns at once; the failure shows on the first command.
      const s = await c.openSession();
      await assert.rejects(s.exec({ language: "python", code: "print(1)" }), (e: unknown) => e instanceof SandboxServiceError);
      await s.close();
    });

    it("retries a request a lost replica swallowed, and reaches a replica that came up meanwhile", async () => {
      let service: SandboxServiceHandle | undefined;
      const serviceNc = await connect({ servers: nats.url });
      // A replica that takes one request from the queue group, never answers, and is gone.
      const blackHole = nc.subscribe(SandboxSubjects.exec, { queue: SANDBOX_QUEUE_GROUP, max: 1 });
      let swallowed = 0;
      const started = (async () => {
        for await (const _ of blackHole) {
          swallowed++;
          service = await startSandboxService({ nc: serviceNc, log: pino({ level: "warn" }), settings: { poolSize: 1 } });
        }
      })();
      await nc.flush();
      try {
        const c = new NatsSandboxClient(nc, { retries: 8, timeoutMs: 300 });
        const r = await c.exec({ language: "python", code: "print('survived')", limits: { wallMs: 1000 } });
        assert.equal(r.stdout, "survived\n");
        assert.equal(swallowed, 1, "the first attempt went to the replica that vanished");
      } finally {
        await started;
        await service?.stop();
        await serviceNc.close();
      }
    });
  });
