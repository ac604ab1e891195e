// Starts and stops a local `nats-server -js` for the embedded `rollstream train` mode and for tests.
// The config raises max_payload to 8 MB so a rollout batch travels as one message (DESIGN §3).
import { spawn, type ChildProcess } from "node:child_process";
import { mkdirSync, writeFileSync, existsSync } from "node:fs";
import { createServer } from "node:net";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { connect as netConnect } from "node:net";
import { killWithParent } from "./child-reaper.js";

export interface LocalNatsServer {
  url: string;
  port: number;
  monitorPort: number;
  storeDir: string;
  process: ChildProcess;
  stop(): Promise<void>;
}

export interface StartNatsOptions {
  storeDir: string;
  port?: number;
  monitorPort?: number;
  maxPayloadBytes?: number;
  binary?: string;
  logFile?: string;
  /** Join a JetStream cluster: this server's name, its route port, and the route ports of its peers. */
  cluster?: { name: string; serverName: string; port: number; routes: number[] };
}

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.unref();
    srv.on("error", reject);
    srv.listen(0, "127.0.0.1", () => {
      const addr = srv.address();
      if (addr === null || typeof addr === "string") return reject(new Error("no port"));
      const port = addr.port;
      srv.close(() => resolve(port));
    });
  });
}

export function findNatsServerBinary(explicit?: string): string {
  const candidates = [explicit, process.env.NATS_SERVER_BIN, "/usr/sbin/nats-server", "/usr/bin/nats-server", "/usr/local/bin/nats-server"];
  for (const c of candidates) if (c && existsSync(c)) return c;
  for (const dir of (process.env.PATH ?? "").split(":")) {
    const p = join(dir, "nats-server");
    if (dir && existsSync(p)) return p;
  }
  throw new Error(
    "nats-server not found. Install it (Debian/Ubuntu: `apt-get install nats-server`), put it on PATH, " +
      "or set NATS_SERVER_BIN; or point NATS_URL at a running server with JetStream enabled.",
  );
}

async function waitForPort(port: number, timeoutMs: number, child: ChildProcess): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (child.exitCode !== null) throw new Error(`nats-server exited early with code ${child.exitCode}`);
    const ok = await new Promise<boolean>((resolve) => {
      const s = netConnect(port, "127.0.0.1");
      s.once("connect", () => {
        s.destroy();
        resolve(true);
      });
      s.once("error", () => resolve(false));
    });
    if (ok) return;
    await sleep(50);
  }
  throw new Error(`nats-server did not listen on port ${port} within ${timeoutMs} ms`);
}

export async function startNatsServer(opts: StartNatsOptions): Promise<LocalNatsServer> {
  const bin = findNatsServerBinary(opts.binary);
  const port = opts.port ?? (await freePort());
  const monitorPort = opts.monitorPort ?? (await freePort());
  mkdirSync(opts.storeDir, { recursive: true });
  const confPath = join(opts.storeDir, "nats.conf");
  const maxPayload = opts.maxPayloadBytes ?? 8 * 1024 * 1024;
  writeFileSync(
    confPath,
    [
      `listen: "127.0.0.1:${port}"`,
      `http: "127.0.0.1:${monitorPort}"`,
      `max_payload: ${maxPayload}`,
      // Batches are up to max_payload; the default 64 MB pending limit per client stays the cap.
      `jetstream { store_dir: ${JSON.stringify(opts.storeDir)} }`,
      ...(opts.cluster
        ? [
            `server_name: ${opts.cluster.serverName}`,
            `cluster { name: ${opts.cluster.name}, listen: "127.0.0.1:${opts.cluster.port}", routes: [${opts.cluster.routes.map((p) => `"nats-route://127.0.0.1:${p}"`).join(", ")}] }`,
          ]
        : []),
      "",
    ].join("\n"),
  );
  const args = ["-c", confPath];
  if (opts.logFile) args.push("-l", opts.logFile);
  const child = killWithParent(spawn(bin, args, { stdio: ["ignore", "ignore", opts.logFile ? "ignore" : "pipe"] }));
  let stderr = "";
  child.stderr?.on("data", (d: Buffer) => {
    stderr = (stderr + d.toString()).slice(-4000);
  });
  try {
    await waitForPort(port, 10_000, child);
  } catch (e) {
    child.kill("SIGKILL");
    throw new Error(`${(e as Error).message}\n${stderr}`);
  }
  const server: LocalNatsServer = {
    url: `nats://127.0.0.1:${port}`,
    port,
    monitorPort,
    storeDir: opts.storeDir,
    process: child,
    async stop() {
      if (child.exitCode !== null || child.signalCode !== null) return;
      const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
      child.kill("SIGTERM");
      const timer = setTimeout(() => child.kill("SIGKILL"), 5000);
      await exited;
      clearTimeout(timer);
    },
  };
  return server;
}
