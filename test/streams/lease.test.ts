// The run's leases (streams/lease.ts): the rule for taking one (leaseVerdict, no NATS), and on a real server
// the compare-and-set that lets exactly one of two contenders win, a standby that waits while the holder
// renews and takes over only after expiry, a holder cut off from the server that stops before its lease can
// expire, a holder that finds another's write, and a release that frees the key at once.
import { test } from "node:test";
import assert from "node:assert/strict";
import { connect, type NatsConnection } from "@nats-io/transport-node";
import type { KV } from "@nats-io/kv";
import { startTestNats, type TestNats } from "../helpers/nats.js";
import { holderName, leaseVerdict, openStateBucket, RunLeases, type Lease, type LeaseIdentity } from "../../streams/index.js";

const me: LeaseIdentity = { host: "h1", pid: 100, instance: "learner-1", pidNs: "pid:[1]" };
const T0 = Date.parse("2025-01-01T00:00:00.000Z");

function leaseOf(id: LeaseIdentity, renewedAt: number, ttlMs = 10_000): Lease {
  return {
    holder: holderName(id),
    host: id.host,
    pid: id.pid,
    ...(id.pidNs ? { pidNs: id.pidNs } : {}),
    since: new Date(renewedAt - 60_000).toISOString(),
    renewedAt: new Date(renewedAt).toISOString(),
    ttlMs,
  };
}

test("leaseVerdict: free, own and expired leases may be taken; a live one of another holder may not", () => {
  const other: LeaseIdentity = { host: "h2", pid: 7, instance: "learner-0", pidNs: "pid:[1]" };
  const alive = () => true;
  assert.deepEqual(leaseVerdict(undefined, me, T0, alive), { take: true, why: "free" });
  assert.deepEqual(leaseVerdict(leaseOf(me, T0 - 5_000), me, T0, alive), { take: true, why: "mine" });
  const live = leaseOf(other, T0 - 9_000);
  assert.deepEqual(leaseVerdict(live, me, T0, alive), { take: false, lease: live, expiresAt: T0 + 1_000 });
  // Expired only once renewedAt + ttl is in the past: the boundary itself is still the holder's.
  assert.equal(leaseVerdict(leaseOf(other, T0 - 10_000), me, T0, alive).take, false);
  assert.deepEqual(leaseVerdict(leaseOf(other, T0 - 10_001), me, T0, alive), { take: true, why: "expired" });
  // The holder's own ttl counts, not the taker's.
  assert.equal(leaseVerdict(leaseOf(other, T0 - 20_000, 30_000), me, T0, alive).take, false);
});

test("leaseVerdict: a dead holder is taken over at once only when its pid means the same process here", () => {
  const dead = () => false;
  const sameHost: LeaseIdentity = { host: "h1", pid: 7, instance: "learner-0", pidNs: "pid:[1]" };
  const fresh = leaseOf(sameHost, T0 - 1_000);
  assert.deepEqual(leaseVerdict(fresh, me, T0, dead), { take: true, why: "holder gone" });
  assert.equal(leaseVerdict(fresh, me, T0, () => true).take, false, "alive: wait for expiry");
  // Another host, another pid namespace (a container with the host's name), or no namespace known: a pid proves nothing.
  assert.equal(leaseVerdict(leaseOf({ ...sameHost, host: "h2" }, T0 - 1_000), me, T0, dead).take, false);
  assert.equal(leaseVerdict(leaseOf({ ...sameHost, pidNs: "pid:[2]" }, T0 - 1_000), me, T0, dead).take, false);
  assert.equal(leaseVerdict(leaseOf({ host: "h1", pid: 7, instance: "x" }, T0 - 1_000), me, T0, dead).take, false);
  assert.equal(leaseVerdict(fresh, { ...me, pidNs: undefined }, T0, dead).take, false);
});

async function withBucket(fn: (kv: KV, nc: NatsConnection, nats: TestNats) => Promise<void>): Promise<void> {
  const nats = await startTestNats();
  const nc = await connect({ servers: nats.url });
  try {
    await fn(await openStateBucket(nc, "lease"), nc, nats);
  } finally {
    await nc.close();
    await nats.cleanup();
  }
}

const settings = { ttlMs: 10_000, renewMs: 2_500 };
const noPids = { alive: () => true };
const id = (host: string, instance = "learner-0"): LeaseIdentity => ({ host, pid: 1, instance });

/** Both contenders' first reads return only once both have read: each then writes over the same revision. */
function readTogether(kvs: KV[]): KV[] {
  let arrived = 0;
  let open = () => {};
  const barrier = new Promise<void>((r) => (open = r));
  return kvs.map((kv) => {
    let first = true;
    return new Proxy(kv, {
      get(target, prop) {
        const v = Reflect.get(target, prop, target);
        if (prop !== "get") return typeof v === "function" ? v.bind(target) : v;
        return async (...args: Parameters<KV["get"]>) => {
          const e = await target.get(...args);
          if (first) {
            first = false;
            if (++arrived === kvs.length) open();
            await barrier;
          }
          return e;
        };
      },
    });
  });
}

test("compare-and-set: of two contenders for a free, a released or an expired lease exactly one wins", async () => {
  await withBucket(async (kv, _nc, nats) => {
    // Two connections, as two processes have: the server orders their writes.
    const nc2 = await connect({ servers: nats.url });
    try {
      const kv2 = await openStateBucket(nc2, "lease");
      for (let round = 0; round < 12; round++) {
        const [ka, kb] = readTogether([kv, kv2]);
        const a = new RunLeases(ka!, id("a"), settings, noPids);
        const b = new RunLeases(kb!, id("b"), settings, noPids);
        if (round % 3 === 2) await kv.put("lease.learner", JSON.stringify(leaseOf(id("gone"), Date.now() - 60_000)));
        const [ta, tb] = await Promise.all([a.take("learner"), b.take("learner")]);
        const winners = [ta, tb].filter((t) => t.held);
        assert.equal(winners.length, 1, `round ${round}: ${winners.length} winners`);
        const loser = ta.held ? tb : ta;
        const winner = ta.held ? ta : tb;
        assert.ok(!loser.held && winner.held);
        // The loser names the winner, not the holder both of them read.
        assert.equal(loser.lease.holder, winner.held.lease.holder);
        assert.equal((await a.read("learner")).lease?.holder, winner.held.lease.holder);
        await winner.held.release();
      }
    } finally {
      await nc2.close();
    }
  });
});

test("a standby waits while the holder renews, and takes over only once the lease of a holder cut off has expired", async () => {
  await withBucket(async (kv, _nc, nats) => {
    const quick = { ttlMs: 1_200, renewMs: 300 };
    const holderConn = await connect({ servers: nats.url });
    const a = new RunLeases(await openStateBucket(holderConn, "lease"), id("a"), quick, noPids);
    const taken = await a.take("evaluator");
    assert.ok(taken.held);
    let lostAt = 0;
    let lostWhy = "";
    taken.held.keep(
      (why) => {
        lostAt = Date.now();
        lostWhy = why;
      },
      { fence: true },
    );
    const b = new RunLeases(kv, id("b", "evaluator-1"), quick, noPids);
    const heard: string[] = [];
    const stop = new AbortController();
    const standby = b.standBy("evaluator", stop.signal, (l) => heard.push(l.holder));
    // Renewed for 4 TTLs: the standby never gets it.
    await new Promise((r) => setTimeout(r, 4 * quick.ttlMs));
    assert.deepEqual(heard, [holderName(id("a"))]);
    const renewed = (await b.read("evaluator")).lease!;
    assert.ok(Date.parse(renewed.renewedAt) > Date.now() - 2 * quick.renewMs, "the holder renews");
    // Cut off: its renewals fail. It gives up before its lease can expire; the standby takes over after that.
    await holderConn.close();
    const lastRenewed = Date.parse((await b.read("evaluator")).lease!.renewedAt);
    const got = await standby;
    const tookAt = Date.now();
    assert.ok(got?.held);
    assert.equal(got.why, "expired");
    assert.ok(lostAt > 0 && lostAt < tookAt, `the holder stopped (${lostAt}) before the takeover (${tookAt})`);
    assert.match(lostWhy, /last renewed \d+ ms ago \(ttl 1200 ms\)/);
    assert.ok(tookAt - lastRenewed > quick.ttlMs, `taken ${tookAt - lastRenewed} ms after the last renewal`);
    assert.ok(tookAt - lastRenewed < quick.ttlMs + 2_000, `taken ${tookAt - lastRenewed} ms after the last renewal`);
    await got.held.release();
  });
});

test("a holder whose key another wrote loses the lease on its next renewal; one that only lost a reply keeps it", async () => {
  await withBucket(async (kv) => {
    const a = new RunLeases(kv, id("a"), { ttlMs: 2_000, renewMs: 200 }, noPids);
    const t = await a.take("orchestrator");
    assert.ok(t.held);
    // Its own value written again (as when a renewal landed but its reply timed out): the next renewal adopts it.
    await kv.put("lease.orchestrator", JSON.stringify(t.held.lease));
    await t.held.renew();
    assert.equal((await a.read("orchestrator")).lease?.holder, holderName(id("a")));
    const lost = new Promise<string>((resolve) => t.held.keep(resolve, { fence: true }));
    await kv.put("lease.orchestrator", JSON.stringify(leaseOf(id("intruder"), Date.now())));
    assert.match(await lost, /^the orchestrator lease is now held by intruder:1:learner-0 \(host intruder, pid 1, since /);
    // Lost is lost: its release leaves the new holder's key alone.
    await t.held.release();
    assert.equal((await a.read("orchestrator")).lease?.holder, "intruder:1:learner-0");
  });
});

test("a released lease is free at once; a holder that was stopped past its lease stops on its first tick", async () => {
  await withBucket(async (kv) => {
    let clock = Date.now();
    const a = new RunLeases(kv, id("a"), { ttlMs: 5_000, renewMs: 100 }, { now: () => clock, alive: () => true });
    const b = new RunLeases(kv, id("b"), settings, noPids);
    const t = await a.take("checkpoint");
    assert.ok(t.held);
    assert.equal((await b.take("checkpoint")).held, null);
    await t.held.release();
    const tb = await b.take("checkpoint");
    assert.ok(tb.held);
    assert.equal(tb.why, "free");
    await tb.held.release();
    // A SIGSTOP, as the fence sees it: the clock jumps past the lease between two ticks.
    const t2 = await a.take("checkpoint");
    assert.ok(t2.held);
    const lost = new Promise<string>((resolve) => t2.held.keep(resolve, { fence: true }));
    clock += 6_000;
    assert.match(await lost, /last renewed 6000 ms ago/);
  });
});

test("a dead holder's lease on this host is taken over at once, through the same compare-and-set", async () => {
  await withBucket(async (kv) => {
    const here: LeaseIdentity = { host: "h", pid: 1, instance: "learner-0", pidNs: "pid:[9]" };
    const dead = new RunLeases(kv, { ...here, pid: 2 }, settings, { alive: () => true });
    assert.ok((await dead.take("learner")).held);
    const next = new RunLeases(kv, here, settings, { alive: (pid) => pid !== 2 });
    const t = await next.take("learner");
    assert.ok(t.held);
    assert.equal(t.why, "holder gone");
    assert.equal(t.previous?.holder, "h:2:learner-0");
  });
});
