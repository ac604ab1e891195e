// `rollstream serve` as a child process, as a user runs it (bench inference, the fleet's integration tests): started
// on a model source (`-c <run config>` or `--checkpoint <folder>`), killed (SIGKILL, as a crash), and restarted on
// the same port, as a restarted server comes back at its address. Each process appends its weight loads to one
// update log, which outlives the processes.
import { type ChildProcess, spawn } from "node:child_process";
import { appendFileSync, existsSync, readFileSync } from "node:fs";
import { killWithParent } from "./child-reaper.js";

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

  /** binPath: the CLI's main.js; source: ["-c", config] or ["--checkpoint", folder]; extraArgs: more flags. */
  constructor(
    private readonly binPath: string,
    private readonly source: string[],
    readonly updateLog: string,
    private readonly stderrLog: string,
    private readonly extraArgs: string[] = [],
  ) {}

  static async start(o: { binPath: string; source: string[]; updateLog: string; stderrLog: string; extraArgs?: string[] }): Promise<ServeProcess> {
    const s = new ServeProcess(o.binPath, o.source, o.updateLog, o.stderrLog, o.extraArgs);
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
    const args = [this.binPath, "serve", ...this.source, "--port", String(this.port), "--update-log", this.updateLog, ...this.extraArgs];
    const child = spawn(process.execPath, args, { stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, NATS_URL: "", LOG_LEVEL: "warn" } });
    killWithParent(child);
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
