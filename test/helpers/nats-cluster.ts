// A 3-server JetStream cluster on loopback for failover tests: servers can be SIGKILLed and started again
// on the same ports and store folders.
import { join } from "node:path";
import type { NatsConnection } from "@nats-io/transport-node";
import { jetstreamManager } from "@nats-io/jetstream";
import { freePort, startNatsServer, type LocalNatsServer } from "../../deploy/local/nats-server.js";
import { waitUntil } from "./run-fixture.js";

export interface TestCluster {
  /** Index i is server `n<i>`; null while it is down. */
  servers: (LocalNatsServer | null)[];
  start(i: number): Promise<void>;
  /** Every server's client URL, comma-separated. */
  url: string;
}

export async function startCluster(dir: string): Promise<TestCluster> {
  // freePort() lets each port go before it returns, so two calls can name the same one: nine distinct.
  const taken = new Set<number>();
  const port = async (): Promise<number> => {
    for (;;) {
      const p = await freePort();
      if (!taken.has(p)) return (taken.add(p), p);
    }
  };
  const routes = [await port(), await port(), await port()];
  const ports = [await port(), await port(), await port()];
  const monitors = [await port(), await port(), await port()];
  const servers: (LocalNatsServer | null)[] = [null, null, null];
  const start = async (i: number) => {
    servers[i] = await startNatsServer({
      storeDir: join(dir, `n${i}`),
      port: ports[i],
      monitorPort: monitors[i],
      cluster: { name: "rs", serverName: `n${i}`, port: routes[i]!, routes: routes.filter((_, k) => k !== i) },
    });
  };
  await Promise.all([0, 1, 2].map(start));
  return { servers, start, url: ports.map((p) => `nats://127.0.0.1:${p}`).join(",") };
}

/** JetStream answers once the cluster has elected its meta leader. */
export async function waitForMetaLeader(nc: NatsConnection): Promise<void> {
  const jsm = await jetstreamManager(nc, { checkAPI: false });
  await waitUntil(
    "JetStream meta leader",
    () =>
      jsm.getAccountInfo().then(
        () => true,
        () => false,
      ),
    30_000,
  );
}
