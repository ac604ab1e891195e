// The host side of one sandbox: spawns bwrap under its own host uid, speaks the supervisor's framed
// control protocol on fds 3/4, collects output with caps, and always has a backstop: if the
// supervisor does not report in time, the whole sandbox is killed (bwrap --die-with-parent takes
// the supervisor with it, and the kernel kills everything else in the pid namespace).
import { closeSync, openSync, readFileSync, writeFileSync } from "node:fs";
import type { Readable, Writable } from "node:stream";
import type { SandboxExecResult, SandboxLanguage } from "../environments/api/sandbox.js";
import { bwrapArgs, INFO_FD, pinsHotPages, sandboxIdMap, USERNS_BLOCK_FD, type HostUidPool, type SandboxLayout } from "./isolation.js";
import type { EffectiveLimits, RlimitSpec } from "./limits.js";
import { OutputCollector } from "./output-collector.js";
import { NativeChild } from "./native-spawn.js";
import { encodeFrame, FrameReader } from "./control-frames.js";

export type PrestartKind = "python" | "node" | "";

export interface CommandSpec {
  language: SandboxLanguage;
  code: string;
  stdin?: string;
  files?: Record<string, string>;
  limits: EffectiveLimits;
  rlimits: RlimitSpec;
  /** What the supervisor starts ahead for the next command (sessions, reused pool sandboxes); "" for nothing. */
  next?: PrestartKind;
  /**
   * One-shot command in a reusable sandbox: after it, the supervisor resets the sandbox (kills every
   * process, empties /workspace, /tmp and /dev/shm, removes IPC objects, checks its own state) and
   * reports whether it is exactly as it started (`SandboxProcess.clean`).
   */
  once?: boolean;
}

interface DoneFrame {
  exitCode: number | null;
  signal: string | null;
  timedOut: boolean;
  killed: boolean;
  cpuMs: number;
  wallMs: number;
  nonce: string;
  error: string;
  clean: boolean;
  /** The C loop reports before its reset and says how that went in a "reset" frame that follows. */
  resetPending: boolean;
}

function parseDone(f: Buffer[]): DoneFrame {
  const s = (i: number) => f[i]?.toString("utf8") ?? "";
  return {
    exitCode: s(1) === "" ? null : Number(s(1)),
    signal: s(2) || null,
    timedOut: s(3) === "1",
    killed: s(4) === "1",
    cpuMs: Number(s(5)) || 0,
    wallMs: Number(s(6)) || 0,
    nonce: s(7),
    error: s(8),
    clean: s(9) === "1",
    resetPending: s(9) === "p",
  };
}

interface RunningCommand {
  spec: CommandSpec;
  out: OutputCollector;
  err: OutputCollector;
  frame: DoneFrame | null;
  marker: Buffer | null;
  killRequested: "output" | null;
  /** The "reset" frame's verdict when it came before the command finished here (its output still arriving). */
  resetClean?: boolean;
  backstop: NodeJS.Timeout;
  backstopFired: boolean;
  resolve: (r: SandboxExecResult) => void;
  reject: (e: Error) => void;
}

/** Thrown when a sandbox cannot run a command at all (it died, or failed to start). */
export class SandboxFailure extends Error {
  constructor(message: string) {
    super(message);
    this.name = "SandboxFailure";
  }
}

// Marker = "\0rs-end:" + 24 hex chars + "\0".
const MARKER_LEN = 1 + 7 + 24 + 1;
/** How long after its wall limit a command may take to be reported before the host kills the sandbox. */
const BACKSTOP_GRACE_MS = 3000;
/** How long a supervisor may take to reset its sandbox after reporting a command before the host kills it. */
const RESET_TIMEOUT_MS = 10_000;
const START_TIMEOUT_MS = 30_000;

const OOM_PATTERN =
  /MemoryError|JavaScript heap out of memory|Array buffer allocation failed|Fatal process out of memory|std::bad_alloc|Cannot allocate memory|out of memory/i;

let nextId = 1;

export class SandboxProcess {
  readonly id = nextId++;
  readonly kind: PrestartKind;
  readonly hostUid: number | undefined;
  /** Milliseconds from spawn to the supervisor's "ready". */
  startMs = 0;
  commands = 0;
  /**
   * The last command was a `once` command and the supervisor's reset after it found nothing left over:
   * the sandbox may serve another request. False after anything else (a session command, a command the
   * host had to cut short by killing the sandbox, a reset that failed).
   */
  clean = false;
  private state: "starting" | "idle" | "busy" | "resetting" | "dead" = "starting";
  /** While resetting: whether the command could leave the sandbox reusable, the reset's deadline, who waits. */
  private reset: { reusable: boolean; timer: NodeJS.Timeout; waiters: Array<() => void> } | null = null;
  private readonly child: NativeChild;
  private readonly ctlIn: Writable;
  private readonly frames = new FrameReader();
  private current: RunningCommand | null = null;
  private earlyStderr = "";
  private readyWaiter: { resolve: () => void; reject: (e: Error) => void } | null = null;
  readonly exited: Promise<void>;
  private onExitHooks: Array<() => void> = [];

  private constructor(
    layout: SandboxLayout,
    kind: PrestartKind,
    private readonly uidPool: HostUidPool | null,
  ) {
    this.kind = kind;
    const t0 = performance.now();
    this.hostUid = layout.features.perSandboxHostUid && uidPool ? uidPool.acquire() : undefined;
    let seccompFd: number | null = null;
    // perExecutionUid: two more fds, bwrap's --info-fd and --userns-block-fd (see mapExecutionUids).
    const mapsIds = layout.features.perExecutionUid && this.hostUid !== undefined;
    try {
      const filter = layout.runtime.seccompPathFor(layout.features.freshNamespaces, pinsHotPages(layout));
      if (layout.features.seccomp && filter) seccompFd = openSync(filter, "r");
      // posix_spawn: a start costs this process the same whatever its size (native-spawn.ts).
      this.child = new NativeChild(layout.bwrap, bwrapArgs(layout, kind), {
        fds: 5,
        extraFd: seccompFd,
        socketsAfter: mapsIds ? 2 : 0,
        ...(this.hostUid !== undefined ? { uid: this.hostUid } : {}),
      });
    } catch (e) {
      if (this.hostUid !== undefined) uidPool?.release(this.hostUid);
      throw new SandboxFailure(`could not spawn bwrap: ${(e as Error).message}`);
    } finally {
      if (seccompFd !== null) closeSync(seccompFd);
    }
    this.ctlIn = this.child.stdio[3] as Writable;
    const ctlOut = this.child.stdio[4] as Readable;
    // A sandbox that dies mid-write resets these sockets; its death is handled on "close".
    for (const s of [this.ctlIn, ctlOut, this.child.stdout!, this.child.stderr!]) s.on("error", () => undefined);
    ctlOut.on("data", (d: Buffer) => this.onControlData(d));
    this.child.stdout!.on("data", (d: Buffer) => this.onOutput(d, "out"));
    this.child.stderr!.on("data", (d: Buffer) => this.onOutput(d, "err"));
    this.exited = new Promise<void>((resolve) => {
      let done = false;
      const finish = (why: string) => {
        if (done) return;
        done = true;
        this.onDeath(why);
        resolve();
      };
      // "close" (not "exit"): by then every byte the sandbox wrote has been read.
      this.child.once("close", (code, signal) => finish(signal ? `killed by ${signal}` : `exited with code ${code}`));
      this.child.once("exit", () => this.releaseUid());
      this.child.once("error", (e) => finish(`spawn error: ${e.message}`));
    });
    this.readyPromise = new Promise<void>((resolve, reject) => {
      this.readyWaiter = {
        resolve: () => {
          this.startMs = performance.now() - t0;
          resolve();
        },
        reject,
      };
    });
    this.readyPromise.catch(() => undefined);
    if (mapsIds) this.mapExecutionUids(layout, this.hostUid!);
  }

  /**
   * perExecutionUid: bwrap has made the sandbox's user namespace and waits (--userns-block-fd) for its uid and
   * gid maps, which only this process, as root, can write with more than one uid in them: the sandbox's own
   * uid, as bwrap would map it, and the range its executions run under (isolation.ts: sandboxIdMap).
   */
  private mapExecutionUids(layout: SandboxLayout, hostUid: number): void {
    const info = this.child.stdio[INFO_FD] as Readable;
    const unblock = this.child.stdio[USERNS_BLOCK_FD] as Writable;
    for (const s of [info, unblock]) s.on("error", () => undefined);
    let text = "";
    const onData = (d: Buffer) => {
      text += d.toString("utf8");
      // Up to a character after the number: a read may end inside it.
      const pid = /"child-pid"\s*:\s*(\d+)\D/.exec(text)?.[1];
      if (!pid) return;
      info.off("data", onData);
      info.resume();
      try {
        // Root writes these maps: only into bwrap's own child, the sandbox it is setting up.
        const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
        const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
        if (ppid !== this.child.pid) throw new Error(`pid ${pid} is not bwrap's child`);
        const map = sandboxIdMap(layout.settings, hostUid);
        writeFileSync(`/proc/${pid}/uid_map`, map);
        writeFileSync(`/proc/${pid}/gid_map`, map);
        unblock.end("1");
      } catch (e) {
        this.earlyStderr += `could not map the per-execution uids: ${(e as Error).message}\n`;
        this.kill();
      }
    };
    info.on("data", onData);
  }

  private readonly readyPromise: Promise<void>;

  /** Starts a sandbox and resolves once its supervisor (and prestarted interpreter) is waiting. */
  static async start(layout: SandboxLayout, kind: PrestartKind, uidPool: HostUidPool | null): Promise<SandboxProcess> {
    const sp = new SandboxProcess(layout, kind, uidPool);
    const timer = setTimeout(() => sp.kill(), START_TIMEOUT_MS);
    try {
      await sp.readyPromise;
    } finally {
      clearTimeout(timer);
    }
    sp.state = "idle";
    return sp;
  }

  get alive(): boolean {
    return this.state !== "dead";
  }

  get idle(): boolean {
    return this.state === "idle";
  }

  /** The command's result has gone out and the supervisor is still resetting the sandbox. */
  get resetting(): boolean {
    return this.state === "resetting";
  }

  /** Resolves once the sandbox is not resetting (idle with `clean` set, or dead). */
  settled(): Promise<void> {
    const r = this.reset;
    if (this.state !== "resetting" || !r) return Promise.resolve();
    return new Promise((resolve) => r.waiters.push(resolve));
  }

  private endReset(clean: boolean): void {
    const r = this.reset;
    if (!r) return;
    this.reset = null;
    clearTimeout(r.timer);
    this.clean = r.reusable && clean && this.state === "resetting";
    if (this.state === "resetting") this.state = "idle";
    for (const w of r.waiters) w();
  }

  get pid(): number | undefined {
    return this.child.pid;
  }

  onExit(fn: () => void): void {
    if (this.state === "dead") fn();
    else this.onExitHooks.push(fn);
  }

  /** Kills the whole sandbox. Safe to call at any time, any number of times. */
  kill(): void {
    const pid = this.child.pid;
    if (pid === undefined || this.child.exitCode !== null || this.child.signalCode !== null) return;
    try {
      process.kill(-pid, "SIGKILL");
    } catch {
      try {
        this.child.kill("SIGKILL");
      } catch {
        /* already gone */
      }
    }
  }

  /** Runs one command; resolves with its result (timeouts, kills and caps are results, not errors). */
  run(spec: CommandSpec): Promise<SandboxExecResult> {
    if (this.state !== "idle") return Promise.reject(new SandboxFailure(`sandbox ${this.id} is ${this.state}, cannot run a command`));
    this.state = "busy";
    this.commands++;
    this.clean = false;
    return new Promise<SandboxExecResult>((resolve, reject) => {
      const cap = spec.limits.maxOutputBytes;
      const cmd: RunningCommand = {
        spec,
        out: new OutputCollector(cap, MARKER_LEN),
        err: new OutputCollector(cap, MARKER_LEN),
        frame: null,
        marker: null,
        killRequested: null,
        backstopFired: false,
        backstop: setTimeout(() => {
          cmd.backstopFired = true;
          this.kill();
        }, spec.limits.wallMs + BACKSTOP_GRACE_MS),
        resolve,
        reject,
      };
      this.current = cmd;
      const rl = Object.entries(spec.rlimits)
        .map(([k, v]) => `${k}=${Array.isArray(v) ? `${v[0]}:${v[1]}` : v}`)
        .join(" ");
      const files = Object.entries(spec.files ?? {}).flat();
      this.ctlIn.write(
        encodeFrame([spec.once ? "once" : "run", spec.language, spec.code, spec.stdin ?? "", spec.limits.wallMs, rl, spec.next ?? "", ...files]),
      );
    });
  }

  private onControlData(d: Buffer): void {
    let frames: Buffer[][];
    try {
      frames = this.frames.push(d);
    } catch {
      this.kill();
      return;
    }
    for (const f of frames) this.onFrame(f);
  }

  private onFrame(fields: Buffer[]): void {
    const kind = fields[0]?.toString("utf8");
    if (kind === "ready") {
      this.readyWaiter?.resolve();
      this.readyWaiter = null;
    } else if (kind === "done" && this.current) {
      const f = parseDone(fields);
      this.current.frame = f;
      this.current.marker = f.nonce ? Buffer.from(`\0rs-end:${f.nonce}\0`, "utf8") : null;
      this.tryFinish();
    } else if (kind === "reset") {
      const clean = fields[1]?.toString("utf8") === "1";
      if (this.state === "resetting") this.endReset(clean);
      else if (this.current?.frame) this.current.resetClean = clean;
    }
  }

  private onOutput(d: Buffer, which: "out" | "err"): void {
    const cmd = this.current;
    if (!cmd) {
      // Outside a command only the supervisor itself writes (bwrap or supervisor errors): keep it for the error message.
      if (which === "err") this.earlyStderr = (this.earlyStderr + d.toString("utf8")).slice(-4000);
      return;
    }
    const col = which === "out" ? cmd.out : cmd.err;
    col.push(d);
    if (col.overflowing && !cmd.killRequested && !cmd.frame) {
      cmd.killRequested = "output";
      this.ctlIn.write(encodeFrame(["kill"]));
    }
    if (cmd.frame) this.tryFinish();
  }

  private tryFinish(): void {
    const cmd = this.current;
    if (!cmd?.frame) return;
    if (cmd.marker && !(cmd.out.endsWith(cmd.marker) && cmd.err.endsWith(cmd.marker))) return;
    this.finishCommand(cmd);
  }

  private finishCommand(cmd: RunningCommand, died?: string): void {
    clearTimeout(cmd.backstop);
    this.current = null;
    const f = cmd.frame;
    const reusable = !!cmd.spec.once && !died && !cmd.backstopFired && this.state !== "dead";
    // Reported before the reset (the C loop): the result goes out now, the sandbox stays out of use until the
    // "reset" frame (a supervisor stuck resetting is killed like one stuck in a command), unless that frame
    // came while the command's output was still arriving.
    this.clean = reusable && (f?.resetPending ? cmd.resetClean === true : !!f?.clean);
    const resetting = !!f?.resetPending && cmd.resetClean === undefined && this.state !== "dead" && !died;
    if (f?.error) {
      // The supervisor refused before running anything (e.g. a file could not be written): a result, not a crash.
      this.afterCommand(resetting, reusable);
      cmd.resolve({
        stdout: "",
        stderr: `rollstream sandbox: ${f.error}\n`,
        exitCode: 126,
        signal: null,
        timedOut: false,
        outOfMemory: false,
        outputTruncated: false,
        wallMs: 0,
        cpuMs: 0,
      });
      return;
    }
    const out = cmd.out.finish(cmd.marker);
    const err = cmd.err.finish(cmd.marker);
    let stderr = err.text;
    const signal = f ? (f.signal ?? null) : "SIGKILL";
    const exitCode = f ? (f.exitCode ?? null) : null;
    const cpuMs = f?.cpuMs ?? 0;
    const timedOut = cmd.backstopFired || !!f?.timedOut || signal === "SIGXCPU" || (signal === "SIGKILL" && !f?.killed && cpuMs >= cmd.spec.limits.cpuMs);
    if (died && !f) stderr += `${stderr && !stderr.endsWith("\n") ? "\n" : ""}[rollstream sandbox: the sandbox was killed (${died})]\n`;
    const outputTruncated = out.truncated || err.truncated || cmd.killRequested === "output";
    const tail = stderr.length > 4096 ? stderr.slice(-4096) : stderr;
    const outOfMemory = !timedOut && !outputTruncated && ((exitCode !== 0 && OOM_PATTERN.test(tail)) || (signal === "SIGKILL" && !f?.killed && !!f));
    this.afterCommand(resetting, reusable);
    cmd.resolve({
      stdout: out.text,
      stderr,
      exitCode,
      signal,
      timedOut,
      outOfMemory,
      outputTruncated,
      wallMs: Math.round((f?.wallMs ?? cmd.spec.limits.wallMs) * 1000) / 1000,
      cpuMs: Math.round(cpuMs * 1000) / 1000,
    });
  }

  private afterCommand(resetting: boolean, reusable: boolean): void {
    if (this.state === "dead") return;
    if (!resetting) {
      this.state = "idle";
      return;
    }
    this.state = "resetting";
    this.reset = { reusable, timer: setTimeout(() => this.kill(), RESET_TIMEOUT_MS), waiters: [] };
  }

  private uidReleased = false;

  private releaseUid(): void {
    if (this.uidReleased) return;
    this.uidReleased = true;
    if (this.hostUid !== undefined) this.uidPool?.release(this.hostUid);
  }

  private onDeath(why: string): void {
    this.state = "dead";
    this.releaseUid();
    if (this.readyWaiter) {
      const detail = this.earlyStderr.trim();
      this.readyWaiter.reject(new SandboxFailure(`sandbox failed to start (${why})${detail ? `: ${detail}` : ""}`));
      this.readyWaiter = null;
    }
    const cmd = this.current;
    if (cmd) {
      if (cmd.backstopFired || cmd.frame) this.finishCommand(cmd, why);
      else {
        clearTimeout(cmd.backstop);
        this.current = null;
        cmd.reject(new SandboxFailure(`the sandbox died during the command (${why})`));
      }
    }
    this.endReset(false);
    for (const fn of this.onExitHooks.splice(0)) fn();
  }
}
