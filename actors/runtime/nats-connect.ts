// One place that decides which NATS server an actor or command talks to.
import { connect, type NatsConnection } from "@nats-io/transport-node";

export function natsUrlFor(configUrl?: string, explicit?: string): string {
  return explicit ?? process.env.NATS_URL ?? configUrl ?? "nats://127.0.0.1:4222";
}

/**
 * `waitForServer`: keep trying until the server answers (actors: a restarted actor must not die again
 * while the run's server is still down). Commands fail at once with a clear line instead.
 */
export async function connectNats(url: string, name: string, opts: { waitForServer?: boolean } = {}): Promise<NatsConnection> {
  try {
    return await connect({
      // A cluster is named as a comma-separated list; the client fails over between them.
      servers: url.split(",").map((u) => u.trim()),
      name,
      waitOnFirstConnect: opts.waitForServer === true,
      maxReconnectAttempts: -1,
      reconnectTimeWait: 500,
      // Big Arrow batches: don't let a ping timeout during a long synchronous kernel call kill us.
      pingInterval: 30_000,
      maxPingOut: 10,
      // Otherwise every request builds two Error objects (stack traces) up front, in case it times out:
      // ~13% of a sandbox client's CPU a request at concurrency 64 (bench sandbox). Timeouts and
      // no-responders still arrive as TimeoutError / RequestError; only their stack says less.
      noAsyncTraces: true,
    });
  } catch (e) {
    throw new Error(`cannot reach NATS at ${url}: ${(e as Error).message}. Start one (nats-server -js) or set NATS_URL.`);
  }
}

export async function natsReachable(url: string): Promise<boolean> {
  try {
    const nc = await connect({ servers: url.split(",").map((u) => u.trim()), timeout: 1500, maxReconnectAttempts: 0, reconnect: false });
    await nc.close();
    return true;
  } catch {
    return false;
  }
}
