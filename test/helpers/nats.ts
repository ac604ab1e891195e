// Every integration test talks to a real nats-server that it starts on a free port with a temp store.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startNatsServer, type LocalNatsServer } from "../../deploy/local/nats-server.js";

export interface TestNats extends LocalNatsServer {
  cleanup(): Promise<void>;
}

export async function startTestNats(opts: { maxPayloadBytes?: number } = {}): Promise<TestNats> {
  const dir = mkdtempSync(join(tmpdir(), "rs-nats-"));
  const server = await startNatsServer({ storeDir: dir, maxPayloadBytes: opts.maxPayloadBytes });
  return Object.assign(server, {
    async cleanup() {
      await server.stop();
      rmSync(dir, { recursive: true, force: true });
    },
  });
}
