// Spawns one of the Python test servers (test/helpers/*.py: python3-zmq, python3-msgpack, python3-websockets from
// Debian) as a child process and reads the address it prints first. The servers stay sources: the compiled test
// finds them in the repository's test/helpers, beside this file's source.
import { spawn, type ChildProcess } from "node:child_process";
import { existsSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";

const HERE = dirname(fileURLToPath(import.meta.url));
/** dist/test/helpers → test/helpers of the repository. */
const SOURCES = resolve(HERE, "..", "..", "..", "test", "helpers");
/** Debian's python3 has the packages; a pyenv shim earlier on PATH may not. */
export const PYTHON = existsSync("/usr/bin/python3") ? "/usr/bin/python3" : "python3";

export interface PythonServer {
  child: ChildProcess;
  /** The first line it printed: its address. */
  address: string;
  /** Resolves with the exit code once it has exited. */
  exited: Promise<number | null>;
  stop(): Promise<void>;
}

export async function startPythonServer(script: string, args: string[]): Promise<PythonServer> {
  const child = spawn(PYTHON, [join(SOURCES, script), ...args], { stdio: ["ignore", "pipe", "pipe"] });
  let stderr = "";
  child.stderr!.on("data", (d: Buffer) => (stderr += d.toString()));
  const exited = new Promise<number | null>((r) => child.once("exit", (code) => r(code)));
  const address = await new Promise<string>((res, rej) => {
    const lines = createInterface({ input: child.stdout! });
    lines.once("line", (l) => res(l.trim()));
    void exited.then((code) => rej(new Error(`${script} exited (${code}) before printing its address: ${stderr.slice(-2000)}`)));
  });
  return {
    child,
    address,
    exited,
    stop: async () => {
      if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
      await exited;
    },
  };
}
