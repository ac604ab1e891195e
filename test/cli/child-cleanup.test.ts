// A process that started a nats-server takes it down however it ends: an uncaught exception, an error
// that exits with process.exit(), a SIGTERM or SIGINT nobody handles. The control: the same server spawned
// without the reaper outlives its parent (so the check for a leftover server can see one).
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { waitUntil } from "../helpers/run-fixture.js";

const natsModule = pathToFileURL(resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "deploy", "local", "nats-server.js")).href;

const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

/** Runs a script that starts a nats-server, writes its pid, then ends the way `ending` says. */
async function leftover(ending: "throw" | "exit" | "SIGTERM" | "SIGINT" | "untracked"): Promise<boolean> {
  const dir = mkdtempSync(join(tmpdir(), "rs-reap-"));
  const pidFile = join(dir, "pid");
  const script = join(dir, "script.mjs");
  const start =
    ending === "untracked"
      ? `const { spawn } = await import("node:child_process"); const { findNatsServerBinary } = await import(${JSON.stringify(natsModule)});
         const child = spawn(findNatsServerBinary(), ["-p", "-1", "-js", "-sd", ${JSON.stringify(join(dir, "store"))}], { stdio: "ignore" }); const pid = child.pid;`
      : `const { startNatsServer } = await import(${JSON.stringify(natsModule)}); const s = await startNatsServer({ storeDir: ${JSON.stringify(join(dir, "store"))} }); const pid = s.process.pid;`;
  const end = {
    throw: `throw new Error("boom");`,
    exit: `process.exit(1);`,
    SIGTERM: `setInterval(() => {}, 1000);`,
    SIGINT: `setInterval(() => {}, 1000);`,
    untracked: `process.exit(1);`,
  }[ending];
  writeFileSync(script, `${start}\n(await import("node:fs")).writeFileSync(${JSON.stringify(pidFile)}, String(pid));\n${end}\n`);
  const parent = spawn(process.execPath, [script], { stdio: "ignore" });
  let serverPid = 0;
  try {
    await waitUntil(
      "the server's pid",
      () => {
        try {
          serverPid = Number(readFileSync(pidFile, "utf8"));
          return serverPid > 0;
        } catch {
          return false;
        }
      },
      20_000,
    );
    if (ending === "SIGTERM" || ending === "SIGINT") parent.kill(ending);
    await new Promise<void>((r) => (parent.exitCode !== null || parent.signalCode !== null ? r() : parent.once("exit", () => r())));
    // A server told to stop takes a moment to flush and go.
    const deadline = Date.now() + 5_000;
    while (alive(serverPid) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    return alive(serverPid);
  } finally {
    if (serverPid && alive(serverPid)) process.kill(serverPid, "SIGKILL");
    parent.kill("SIGKILL");
    rmSync(dir, { recursive: true, force: true });
  }
}

test("the control: a nats-server spawned without the reaper outlives a parent that exits", async () => {
  assert.equal(await leftover("untracked"), true);
});

for (const ending of ["throw", "exit", "SIGTERM", "SIGINT"] as const) {
  test(`a nats-server started by a process that ends by ${ending} goes with it`, async () => {
    assert.equal(await leftover(ending), false);
  });
}
