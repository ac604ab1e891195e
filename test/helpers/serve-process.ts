// `rollstream serve` as a child process, as a user runs it: started on a run config (the run's model, its initial
// weights until the fleet pushes a version), SIGKILLed, and restarted on the same port. Each process appends its
// weight loads to one update log, which outlives the processes.
import { type ChildProcess, spawn } from "node:child_process";
import { appendFileSync, existsSync, readFileSync } from "node:fs";
import { cliMain } from "./run-fixture.js";

export interface UpdateLine {
  version: string;
  source: string;
  at: number;
  ms: number;
  aborted: number;
  pid: number;
}

export class ServeProcess {
  private child: ChildProcess | null = null;
  port = 0;

  constructor(
    private readonly configPath: string,
    readonly updateLog: string,
    private readonly stderrLog: string,
    private readonly extraArgs: string[] = [],
  ) {}

  static async start(configPath: string, updateLog: string, stderrLog: string, extraArgs: string[] = []): Promise<ServeProcess> {
    const s = new ServeProcess(configPath, updateLog, stderrLog, extraArgs);
    await s.restart();
    return s;
  }

  get url(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  get alive(): boolean {
    return this.child !== null && this.child.exitCode === null && this.child.signalCode === null;
  }

  async restart(): Promise<void> {
    if (this.alive) return;
    const args = [cliMain, "serve", "-c", this.configPath, "--port", String(this.port), "--threads", "1", "--update-log", this.updateLog, ...this.extraArgs];
    const child = spawn(process.execPath, args, { stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, NATS_URL: "", LOG_LEVEL: "warn" } });
    this.child = child;
    child.stderr!.on("data", (d: Buffer) => appendFileSync(this.stderrLog, d));
    const url = await new Promise<string>((resolve, reject) => {
      let out = "";
      child.stdout!.on("data", (d: Buffer) => {
        out += d.toString();
        const m = /listening on (http:\/\/\S+)/.exec(out);
        if (m) resolve(m[1]!);
      });
      child.once("exit", (code) => reject(new Error(`rollstream serve exited (${code}) before listening; see ${this.stderrLog}`)));
    });
    this.port = Number(new URL(url).port);
  }

  /** SIGKILL: requests in flight get a reset, nothing is cleaned up. */
  async kill(): Promise<void> {
    const child = this.child;
    if (!child || !this.alive) return;
    const exited = new Promise((r) => child.once("exit", r));
    child.kill("SIGKILL");
    await exited;
  }

  async stop(): Promise<void> {
    const child = this.child;
    if (!child || !this.alive) return;
    const exited = new Promise((r) => child.once("exit", r));
    child.kill("SIGTERM");
    await exited;
  }

  /** Every weight load of every process on this server so far (the startup one included). */
  updates(): UpdateLine[] {
    if (!existsSync(this.updateLog)) return [];
    return readFileSync(this.updateLog, "utf8")
      .split("\n")
      .filter((l) => l.trim())
      .map((l) => JSON.parse(l) as UpdateLine);
  }
}
