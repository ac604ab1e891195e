// startNatsServer's ownSession: the server is a session leader, as a server run as its own service is, so a
// host that shares the CPU between sessions (autogroups) gives it a share of its own. Without the option it
// stays in the caller's session (the control).
import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startNatsServer } from "../../deploy/local/nats-server.js";
import { procStat } from "../../sandbox/test/proc.js";

/** The session id of a process (/proc/<pid>/stat). */
const sessionOf = (pid: number): number => procStat(pid, 3);

for (const ownSession of [true, false]) {
  test(`nats-server ${ownSession ? "in a session of its own with ownSession" : "in the caller's session without it"}`, async () => {
    const dir = mkdtempSync(join(tmpdir(), "rs-nats-session-"));
    try {
      const srv = await startNatsServer({ storeDir: join(dir, "store"), ownSession });
      try {
        const pid = srv.process.pid;
        assert.ok(pid !== undefined && pid > 0);
        // Our session id reads 0 where its leader lives outside our pid namespace (a container started by
        // `docker exec`, as CI is); the comparisons below hold either way.
        const ours = sessionOf(process.pid);
        if (ownSession) {
          assert.equal(sessionOf(pid), pid, "the server leads its own session");
          assert.notEqual(sessionOf(pid), ours);
        } else {
          assert.equal(sessionOf(pid), ours, "the server shares the caller's session");
          assert.notEqual(sessionOf(pid), pid, "and does not lead one");
        }
        // Either way it serves and stops as before.
        const varz = (await (await fetch(`http://127.0.0.1:${srv.monitorPort}/varz`)).json()) as { port: number };
        assert.equal(varz.port, srv.port);
      } finally {
        await srv.stop();
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
}
