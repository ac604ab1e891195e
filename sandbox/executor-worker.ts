// The worker-thread side of the threaded executor: owns a SandboxExecutor (pool, sandbox processes,
// sessions) so that spawning bwrap — a fork of this whole process — and reading sandbox pipes happen on
// this thread's event loop, not on the one that answers NATS requests. Logs go to the parent as lines.
import { parentPort, workerData } from "node:worker_threads";
import { pino } from "pino";
import { SandboxRequestError } from "./errors.js";
import { SandboxExecutor } from "./executor.js";
import { SandboxFailure } from "./sandbox-process.js";
import type { WireError, WorkerCall, WorkerEvent, WorkerInit } from "./worker-protocol.js";

const STATS_EVERY_MS = 1_000;

function toWire(e: unknown): WireError {
  if (e instanceof SandboxRequestError) return { kind: "request", code: e.code, message: e.message };
  if (e instanceof SandboxFailure) return { kind: "failure", message: e.message };
  return { kind: "other", message: (e as Error)?.message ?? String(e) };
}

async function main(): Promise<void> {
  const port = parentPort!;
  const init = workerData as WorkerInit;
  const post = (ev: WorkerEvent) => port.postMessage(ev);
  const log = pino({ level: init.logLevel }, { write: (line: string) => post({ t: "log", line }) });
  let executor: SandboxExecutor;
  try {
    executor = await SandboxExecutor.create(init.settings, log);
  } catch (e) {
    post({ t: "startFailed", message: (e as Error)?.message ?? String(e) });
    return;
  }
  post({ t: "ready", isolation: executor.isolation, stats: executor.stats() });
  const timer = setInterval(() => post({ t: "stats", stats: executor.stats() }), STATS_EVERY_MS);
  timer.unref();

  const run = (call: WorkerCall): Promise<unknown> | unknown => {
    switch (call.op) {
      case "exec":
        return executor.exec(call.req);
      case "execBatch":
        return executor.execBatch(call.req);
      case "openSession":
        return executor.openSession(call.sessionId, call.opts);
      case "sessionExec":
        return executor.sessionExec(call.sessionId, call.req);
      case "closeSession":
        return executor.closeSession(call.sessionId);
      case "setOutputCeiling":
        return executor.setOutputCeiling(call.bytes);
      case "sandboxPids":
        return executor.sandboxPids();
      case "drain":
        return executor.drain(call.ms);
      case "close":
        clearInterval(timer);
        return executor.close();
    }
  };
  port.on("message", (call: WorkerCall) => {
    Promise.resolve()
      .then(() => run(call))
      .then(
        (value) => post({ t: "reply", id: call.id, value: value ?? null, stats: executor.stats() }),
        (e) => post({ t: "error", id: call.id, error: toWire(e), stats: executor.stats() }),
      );
  });
}

void main();
