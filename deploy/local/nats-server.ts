// Starts and stops a local `nats-server -js` for the embedded `rollstream train` mode and for tests.
// The config raises max_payload to 8 MB so a rollout batch travels as one message (DESIGN §3).
import { spawn, type ChildProcess } from "node:child_process";
import { mkdirSync, writeFileSync, existsSync, readFileSync } from "node:fs";
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
  /** JetStream's file store limit (max_file_store); the server's free disk when not given. */
  maxFileStoreBytes?: number;
  binary?: string;
  logFile?: string;
  /** Join a JetStream cluster: this server's name, its route port, and the route ports of its peers. */
  cluster?: { name: string; serverName: string; port: number; routes: number[] };
  /** How to find a free port for the client and monitor ports not named above (tests); freePort() by default. */
  pickPort?: () => Promise<number>;
  /**
   * Start it in a session of its own (setsid), as a server run as its own service is. Where the kernel shares
   * the CPU between sessions first (autogroups: a host whose processes are all in the root cgroup), it then
   * gets a session's share instead of splitting the caller's with everything else the caller started.
   */
  ownSession?: boolean;
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

/** Thrown when nats-server could not bind one of its ports: another process holds it. */
class PortTakenError extends Error {
  constructor(
    message: string,
    readonly port: number,
  ) {
    super(message);
  }
}

// Something else may have listened on the client port we chose: nats-server then exits, but waitForPort's connect
// may already have succeeded. The monitor endpoint of the server we started names the client port it serves.
async function checkItIsOurs(port: number, monitorPort: number, child: ChildProcess): Promise<void> {
  const deadline = Date.now() + 5_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`nats-server exited early with code ${child.exitCode}`);
    try {
      const varz = (await (await fetch(`http://127.0.0.1:${monitorPort}/varz`)).json()) as { port?: number };
      if (varz.port === port && child.exitCode === null) return;
    } catch {
      // not answering yet
    }
    if (Date.now() > deadline) throw new Error(`nats-server on port ${port} did not answer on its monitor port ${monitorPort}`);
    await sleep(50);
  }
}

// freePort() lets its port go before nats-server binds it, so another process can take it in between (seen in
// CI: "bind: address already in use" on the monitor port). Ports we chose ourselves are chosen again; ports the
// caller named are the caller's to fix, so that error is passed on.
export async function startNatsServer(opts: StartNatsOptions): Promise<LocalNatsServer> {
  const named = [opts.port, opts.monitorPort, opts.cluster?.port].filter((p) => p !== undefined);
  for (let attempt = 1; ; attempt++) {
    try {
      return await startNatsServerOnce(opts);
    } catch (e) {
      if (!(e instanceof PortTakenError) || named.includes(e.port) || attempt >= 5) throw e;
    }
  }
}

async function distinctFreePort(opts: StartNatsOptions, taken: Array<number | undefined>): Promise<number> {
  for (;;) {
    const p = await (opts.pickPort ?? freePort)();
    if (!taken.includes(p)) return p;
  }
}

async function startNatsServerOnce(opts: StartNatsOptions): Promise<LocalNatsServer> {
  const bin = findNatsServerBinary(opts.binary);
  const port = opts.port ?? (await distinctFreePort(opts, [opts.monitorPort]));
  const monitorPort = opts.monitorPort ?? (await distinctFreePort(opts, [port]));
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
      `jetstream { store_dir: ${JSON.stringify(opts.storeDir)}${opts.maxFileStoreBytes ? `, max_file_store: ${opts.maxFileStoreBytes}` : ""} }`,
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
  const child = killWithParent(spawn(bin, args, { detached: opts.ownSession === true, stdio: ["ignore", "ignore", opts.logFile ? "ignore" : "pipe"] }));
  let stderr = "";
  child.stderr?.on("data", (d: Buffer) => {
    stderr = (stderr + d.toString()).slice(-4000);
  });
  try {
    await waitForPort(port, 10_000, child);
    await checkItIsOurs(port, monitorPort, child);
  } catch (e) {
    child.kill("SIGKILL");
    // The exit can come before the last of stderr: wait for the pipe to close so the reason is in the message.
    await Promise.race([new Promise((r) => child.once("close", r)), sleep(1000)]);
    const log = opts.logFile && existsSync(opts.logFile) ? readFileSync(opts.logFile, "utf8").slice(-4000) : "";
    const why = `${(e as Error).message}\n${stderr}${log}`;
    const taken = /127\.0\.0\.1:(\d+): bind: address already in use/.exec(why);
    throw taken ? new PortTakenError(why.trim(), Number(taken[1])) : new Error(why.trim());
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
