// `train`'s second step, the server: the NATS server named by --nats, NATS_URL or the config, which must
// answer now; else the run's embedded server when one is live (another train's, or one left by a train that
// was killed: never a second server on the same store); else one of its own with its store under
// runs/<run>/nats. A server train started is part of the run: supervised (brought back on the same port and
// store if it dies) and stopped last, by cleanup.
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { natsReachable } from "../../actors/runtime/nats-connect.js";
import { startNatsServer, type LocalNatsServer } from "../../deploy/local/nats-server.js";
import { LIVE_URL_FILE, liveRunUrl } from "../run-nats.js";
import { SERVER_LOG, type PreparedRun } from "./prepare.js";

export interface FoundServer {
  url: string;
  /** The server train started, or null when it uses one named to it. */
  server: LocalNatsServer | null;
}

/** What superviseServer reads and updates: the newest server is the one cleanup stops. */
export interface ServerHolder {
  readonly stopping: boolean;
  server: LocalNatsServer | null;
  say(line: string): void;
}

const serverLog = (runDir: string) => join(runDir, "logs", SERVER_LOG);

/** The named server when it answers (exit code 3, said, when it does not); else a local one, announced. */
export async function findOrStartServer(run: PreparedRun, explicit?: string): Promise<FoundServer | number> {
  const url = explicit ?? process.env.NATS_URL ?? run.config.nats.url;
  if (url) {
    if (!(await natsReachable(url))) {
      process.stderr.write(`NATS at ${url} is not reachable\n`);
      return 3;
    }
    return { url, server: null };
  }
  // Its owner, if alive, refuses this train (owner.ts); a dead one's successor goes on with that server.
  const live = await liveRunUrl(run.runDir);
  if (live) {
    process.stdout.write(`the run's nats-server is already running at ${live}: using it\n`);
    return { url: live, server: null };
  }
  // A session of its own, as the actors have (launcher.ts): its CPU share, and a terminal's Ctrl-C reaches
  // `train` alone, which stops the server after its actors have drained through it.
  const store = join(run.runDir, "nats");
  const server = await startNatsServer({ storeDir: store, logFile: serverLog(run.runDir), ownSession: true });
  // `doctor`, `inspect` and `replay` look here first, so they read this live server, not a copy of its store.
  writeFileSync(join(run.runDir, LIVE_URL_FILE), `${server.url}\n`);
  process.stdout.write(`started nats-server at ${server.url} (store ${store}, monitoring http://127.0.0.1:${server.monitorPort}/jsz)\n`);
  return { url: server.url, server };
}

/** Restarts `srv` on its port and store whenever it exits before train stops, retrying with a growing pause. */
export function superviseServer(holder: ServerHolder, srv: LocalNatsServer, runDir: string): void {
  srv.process.once("exit", (code, signal) => {
    if (holder.stopping) return;
    holder.say(`nats-server exited (code ${code}, signal ${signal}): restarting it on the same store`);
    void restartServer(holder, srv, runDir, 1);
  });
}

async function restartServer(holder: ServerHolder, srv: LocalNatsServer, runDir: string, attempt: number): Promise<void> {
  try {
    holder.server = await startNatsServer({
      storeDir: srv.storeDir,
      port: srv.port,
      monitorPort: srv.monitorPort,
      logFile: serverLog(runDir),
      ownSession: true,
    });
    superviseServer(holder, holder.server, runDir);
  } catch (e) {
    if (holder.stopping) return;
    holder.say(`nats-server restart ${attempt} failed: ${(e as Error).message.split("\n")[0]}`);
    await sleep(Math.min(10_000, 500 * 2 ** attempt));
    return restartServer(holder, srv, runDir, attempt + 1);
  }
}
