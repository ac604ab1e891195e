import { spawn } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync, mkdirSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import type { CodeSandbox, SandboxExecRequest, SandboxExecResult, SandboxSession } from "../../environments/api/sandbox.js";

/**
 * A test double of the CodeSandbox interface: runs the interpreter in a plain subprocess (no isolation)
 * in a temp dir, with a wall-clock limit. Good enough to check graders end to end; the real sandbox
 * service (bubblewrap, NATS) is tested in its own module.
 */
export class SubprocessSandbox implements CodeSandbox {
  execs = 0;

  async exec(req: SandboxExecRequest): Promise<SandboxExecResult> {
    const dir = mkdtempSync(join(tmpdir(), "rs-subsandbox-"));
    try {
      return await this.run(dir, req);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }

  async openSession(): Promise<SandboxSession> {
    const dir = mkdtempSync(join(tmpdir(), "rs-subsession-"));
    return {
      id: dir,
      exec: (req) => this.run(dir, req),
      close: async () => rmSync(dir, { recursive: true, force: true }),
    };
  }

  private run(dir: string, req: SandboxExecRequest): Promise<SandboxExecResult> {
    this.execs++;
    for (const [path, text] of Object.entries(req.files ?? {})) {
      mkdirSync(dirname(join(dir, path)), { recursive: true });
      writeFileSync(join(dir, path), text);
    }
    const [cmd, args] =
      req.language === "python" ? ["python3", ["-c", req.code]] : req.language === "node" ? [process.execPath, ["-e", req.code]] : ["bash", ["-c", req.code]];
    const t0 = performance.now();
    return new Promise((resolve) => {
      const child = spawn(cmd, args as string[], { cwd: dir, stdio: ["pipe", "pipe", "pipe"] });
      let stdout = "";
      let stderr = "";
      let timedOut = false;
      child.stdout.on("data", (d: Buffer) => (stdout += d.toString()));
      child.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
      const timer = setTimeout(() => {
        timedOut = true;
        child.kill("SIGKILL");
      }, req.limits?.wallMs ?? 10_000);
      child.stdin.on("error", () => undefined);
      child.stdin.end(req.stdin ?? "");
      child.on("close", (code, signal) => {
        clearTimeout(timer);
        const wallMs = performance.now() - t0;
        resolve({ stdout, stderr, exitCode: code, signal, timedOut, outOfMemory: false, outputTruncated: false, wallMs, cpuMs: wallMs });
      });
    });
  }
}
