// One real nats-server + one sandbox service + a client, shared by the tests of a file.
import { connect, type NatsConnection } from "@nats-io/transport-node";
import { pino } from "pino";
import { startTestNats, type TestNats } from "../../test/helpers/nats.js";
import { startSandboxService, type SandboxServiceHandle, type SandboxSettingsInput } from "../index.js";
import { NatsSandboxClient } from "../../streams/sandbox-client.js";
import type { SandboxExecRequest, SandboxExecResult } from "../../environments/api/sandbox.js";

export interface SandboxFixture {
  nats: TestNats;
  nc: NatsConnection;
  service: SandboxServiceHandle;
  client: NatsSandboxClient;
  stop(): Promise<void>;
}

export async function startSandboxFixture(settings: SandboxSettingsInput = {}): Promise<SandboxFixture> {
  const nats = await startTestNats();
  const nc = await connect({ servers: nats.url });
  const log = pino({ level: process.env.LOG_LEVEL ?? "warn" }, pino.destination(2));
  let service: SandboxServiceHandle;
  try {
    service = await startSandboxService({ nc, log, settings: { poolSize: 2, ...settings } });
  } catch (e) {
    await nc.close();
    await nats.cleanup();
    throw e;
  }
  const client = new NatsSandboxClient(nc, { timeoutMs: 15_000, retries: 1 });
  return {
    nats,
    nc,
    service,
    client,
    async stop() {
      await service.stop();
      await nc.close();
      await nats.cleanup();
    },
  };
}

/** The service still answers a trivial program correctly (used after every attack). */
export async function assertHealthy(client: NatsSandboxClient): Promise<void> {
  const r = await client.exec({ language: "python", code: "print(1)" });
  if (r.stdout !== "1\n" || r.exitCode !== 0) throw new Error(`service unhealthy after the attempt: ${JSON.stringify(r)}`);
}

export function describeResult(r: SandboxExecResult): string {
  return JSON.stringify({ ...r, stdout: r.stdout.slice(0, 500), stderr: r.stderr.slice(-800) });
}

/**
 * A fork bomb and a memory bomb started side by side, then, once they have had 300 ms to go off, a victim run
 * next to them: the three results (the victim's first, it is what the caller checks before the bombs end).
 */
export async function bombsBesideVictim(
  client: NatsSandboxClient,
  programs: { fork: SandboxExecRequest; memory: SandboxExecRequest; victim: SandboxExecRequest },
): Promise<{ victim: SandboxExecResult; bombs: Promise<[SandboxExecResult, SandboxExecResult]> }> {
  const bombs = Promise.all([client.exec(programs.fork), client.exec(programs.memory)]);
  await new Promise((r) => setTimeout(r, 300));
  return { victim: await client.exec(programs.victim), bombs };
}
