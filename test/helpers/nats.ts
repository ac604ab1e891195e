// Every integration test talks to a real nats-server that it starts on a free port with a temp store.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startNatsServer, type LocalNatsServer } from "../../deploy/local/nats-server.js";

export interface TestNats extends LocalNatsServer {
  cleanup(): Promise<void>;
}

export async function startTestNats(opts: { maxPayloadBytes?: number; maxFileStoreBytes?: number } = {}): Promise<TestNats> {
  const dir = mkdtempSync(join(tmpdir(), "rs-nats-"));
  const server = await startNatsServer({ storeDir: dir, maxPayloadBytes: opts.maxPayloadBytes, maxFileStoreBytes: opts.maxFileStoreBytes });
  return Object.assign(server, {
    async cleanup() {
      await server.stop();
      rmSync(dir, { recursive: true, force: true });
    },
  });
}

/**
 * Stops a process with SIGSTOP and returns once the kernel shows it stopped (state T in /proc): a signal is
 * delivered asynchronously, and a server still running on the other core can answer one more quick request.
 */
export async function stopProcess(pid: number): Promise<void> {
  process.kill(pid, "SIGSTOP");
  const { readFileSync } = await import("node:fs");
  const deadline = Date.now() + 5_000;
  while (Date.now() < deadline) {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    if (/^\d+ \(.*\) [Tt] /s.test(stat)) return;
    await new Promise((r) => setTimeout(r, 5));
  }
  throw new Error(`process ${pid} did not stop within 5 s`);
}
