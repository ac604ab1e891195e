// Starting bwrap without copying the service: node's spawn() is a fork(), which copies every page table of
// the calling process before the child can exec, and holds the event loop meanwhile, longer the larger the
// process (sandbox/README.md, "start call"). posix_spawn (the rs_spawn addon, spawn/spawn.cc) shares the
// address space until the exec instead, so a start costs the same whatever the caller's size. NativeChild is
// the part of ChildProcess that SandboxProcess uses.
import { EventEmitter } from "node:events";
import { closeSync, existsSync } from "node:fs";
import { createRequire } from "node:module";
import { Socket } from "node:net";
import { constants } from "node:os";
import { join } from "node:path";
import { supervisorDir } from "./supervisor-source.js";

interface SpawnAddon {
  socketPair(): [number, number];
  spawn(file: string, argv: string[], fds: number[]): number;
  reap(pid: number): [number, number] | null;
}

const SETPRIV = "/usr/bin/setpriv";
let addon: SpawnAddon | undefined;

/** The rs_spawn addon (built by npm ci: node-gyp in sandbox/spawn); throws, naming the fix, when it is not built. */
export function nativeSpawnAddon(): SpawnAddon {
  if (addon) return addon;
  const path = join(supervisorDir(), "..", "spawn", "build", "Release", "rs_spawn.node");
  if (!existsSync(path))
    throw new Error(`sandbox: ${path} is not built; run \`npm ci\` (or \`npx node-gyp rebuild --directory=sandbox/spawn\`), which needs a C++ compiler`);
  addon = createRequire(import.meta.url)(path) as SpawnAddon;
  return addon;
}

/**
 * Throws, naming the fix, when sandboxes cannot be started here: the addon is not built, or, for starts under
 * other host uids (as root), setpriv is missing (posix_spawn cannot change uids; setpriv does, then execs bwrap).
 */
export function assertCanSpawn(asOtherUid: boolean): void {
  nativeSpawnAddon();
  if (asOtherUid && !existsSync(SETPRIV))
    throw new Error(`sandbox: ${SETPRIV} is missing; as root each sandbox starts under a host uid of its own through it (Debian/Ubuntu: util-linux)`);
}

// Every live NativeChild, reaped when a SIGCHLD arrives (libuv reaps only the children it spawned itself).
// While one lives, a timer keeps the event loop alive, as a ChildProcess's handle does (a signal listener
// does not), and polls once a second in case a SIGCHLD was merged with another.
const live = new Map<number, NativeChild>();
let listening = false;
let keepAlive: NodeJS.Timeout | null = null;

function reapAll(): void {
  for (const child of [...live.values()]) child.poll();
}

function track(child: NativeChild): void {
  live.set(child.pid, child);
  if (!listening) {
    listening = true;
    process.on("SIGCHLD", reapAll);
  }
  keepAlive ??= setInterval(reapAll, 1000);
}

function untrack(pid: number): void {
  live.delete(pid);
  if (live.size === 0 && keepAlive) {
    clearInterval(keepAlive);
    keepAlive = null;
  }
}

export interface NativeSpawnOptions {
  /** How many of the child's fds, from 0: 0 is /dev/null, the others socket pairs to this process. */
  fds: number;
  /** An fd of this process to hand over as the child's next fd (after the pairs), or null. */
  extraFd: number | null;
  /** Socket pairs for the fds after that one (perExecutionUid: bwrap's info and userns-block fds); default 0. */
  socketsAfter?: number;
  /** Host uid and gid to run under (needs root; through setpriv). */
  uid?: number;
}

/**
 * A child started by posix_spawn in a session of its own: `stdio[i]` is a socket to its fd i (null for fd 0),
 * "exit" and then "close" (after every socket ended) are emitted with (code, signal), as ChildProcess does.
 */
export class NativeChild extends EventEmitter {
  readonly pid: number;
  readonly stdio: Array<Socket | null>;
  exitCode: number | null = null;
  signalCode: NodeJS.Signals | null = null;
  private openSockets: number;
  private closed = false;

  constructor(file: string, args: string[], opts: NativeSpawnOptions) {
    super();
    const a = nativeSpawnAddon();
    const ours: number[] = [];
    const theirs: number[] = [-1];
    // The child's ends of the socket pairs: its copies after the spawn, so ours are closed either way.
    const childEnds: number[] = [];
    try {
      for (let i = 1; i < opts.fds; i++) {
        const [mine, child] = a.socketPair();
        ours.push(mine);
        theirs.push(child);
        childEnds.push(child);
      }
      if (opts.extraFd !== null) theirs.push(opts.extraFd);
      for (let i = 0; i < (opts.socketsAfter ?? 0); i++) {
        const [mine, child] = a.socketPair();
        ours.push(mine);
        theirs.push(child);
        childEnds.push(child);
      }
      const argv = opts.uid !== undefined ? [SETPRIV, `--reuid=${opts.uid}`, `--regid=${opts.uid}`, "--clear-groups", "--", file, ...args] : [file, ...args];
      this.pid = a.spawn(argv[0]!, argv, theirs);
    } catch (e) {
      for (const fd of ours) closeFd(fd);
      throw e;
    } finally {
      for (const fd of childEnds) closeFd(fd);
    }
    // stdio[i] is the socket to the child's fd i: null for fd 0 and the handed-over fd.
    const sockets = ours.map((fd) => new Socket({ fd, readable: true, writable: true }));
    this.stdio = [null, ...sockets.slice(0, opts.fds - 1)];
    if (opts.extraFd !== null) this.stdio.push(null);
    this.stdio.push(...sockets.slice(opts.fds - 1));
    this.openSockets = ours.length;
    for (const s of this.stdio) s?.once("close", () => this.socketClosed());
    track(this);
    setImmediate(() => this.poll()); // it may be gone already; "exit" is never emitted before the caller listens
  }

  get stdout(): Socket {
    return this.stdio[1]!;
  }

  get stderr(): Socket {
    return this.stdio[2]!;
  }

  kill(signal: NodeJS.Signals = "SIGTERM"): boolean {
    if (this.exitCode !== null || this.signalCode !== null) return false;
    try {
      process.kill(this.pid, signal);
      return true;
    } catch {
      return false;
    }
  }

  /** Reaps it if it has exited (called on SIGCHLD and when its sockets end). */
  poll(): void {
    if (this.exitCode !== null || this.signalCode !== null) return;
    let r: [number, number] | null;
    try {
      r = nativeSpawnAddon().reap(this.pid);
    } catch {
      r = [-1, 0]; // not our child any more (reaped elsewhere): treat as gone
    }
    if (r === null) return;
    untrack(this.pid);
    const [code, sig] = r;
    const name = sig ? ((Object.entries(constants.signals).find(([, n]) => n === sig)?.[0] ?? `SIG${sig}`) as NodeJS.Signals) : null;
    if (name) this.signalCode = name;
    else this.exitCode = code;
    this.emit("exit", name ? null : code, name);
    // As ChildProcess does: a socket nobody reads would never see its end, and "close" would never come.
    for (const s of this.stdio) if (s && !s.destroyed && s.readableFlowing !== true) s.resume();
    this.maybeClose();
  }

  private socketClosed(): void {
    this.openSockets--;
    // Its sockets end when every process holding them is gone: bwrap has exited or is about to.
    if (this.openSockets === 0) this.waitForExit();
    this.maybeClose();
  }

  private waitForExit(): void {
    this.poll();
    if (this.exitCode === null && this.signalCode === null) setTimeout(() => this.waitForExit(), 10);
  }

  private maybeClose(): void {
    if (this.closed || this.openSockets > 0 || (this.exitCode === null && this.signalCode === null)) return;
    this.closed = true;
    // A turn later, as ChildProcess does: whoever awaited "exit" can still listen for "close".
    setImmediate(() => this.emit("close", this.exitCode, this.signalCode));
  }
}

function closeFd(fd: number): void {
  try {
    closeSync(fd);
  } catch {
    /* already closed */
  }
}
