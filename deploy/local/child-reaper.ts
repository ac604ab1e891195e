// Child processes a command starts (its nats-server, its actors) die with it, whatever way it ends: a
// clean return stops them first and finds nothing left here; an error that ends the process with
// process.exit(), an uncaught exception, or a SIGTERM / SIGINT / SIGHUP that nobody else handles still
// takes them down. Without this, `rollstream bench sandbox` failing early left its nats-server running.
import type { ChildProcess } from "node:child_process";

const live = new Set<ChildProcess>();
let installed = false;

function killAll(signal: NodeJS.Signals): void {
  for (const child of live) {
    if (child.exitCode === null && child.signalCode === null) {
      try {
        child.kill(signal);
      } catch {
        // already gone
      }
    }
  }
  live.clear();
}

function install(): void {
  installed = true;
  // 'exit' runs synchronously at the very end: a signal is all there is time for. SIGTERM lets a
  // nats-server flush its store; an actor drains on it.
  process.once("exit", () => killAll("SIGTERM"));
  for (const sig of ["SIGTERM", "SIGINT", "SIGHUP"] as const) {
    const onSignal = () => {
      // A command with its own handler (train drains its actors on Ctrl-C) decides what happens.
      if (process.listenerCount(sig) > 1) return;
      killAll("SIGTERM");
      process.off(sig, onSignal);
      process.kill(process.pid, sig); // the default action: end this process as the signal would have
    };
    // First in line, so it counts the other listeners before a `once` one removes itself.
    process.prependListener(sig, onSignal);
  }
}

/** Kills `child` when this process ends, unless it ended first. */
export function killWithParent(child: ChildProcess): ChildProcess {
  if (!installed) install();
  live.add(child);
  child.once("exit", () => live.delete(child));
  return child;
}
