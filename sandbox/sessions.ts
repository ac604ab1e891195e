// Sessions: one sandbox kept for one rollout. It is a live sandbox (supervisor as pid 1, a
// size-capped tmpfs /workspace and /tmp) taken from the warm pool, so opening one costs no start;
// commands run one after another, each in a fresh process (the supervisor forks it, and prestarts
// the next interpreter while the caller reads the result), and files persist between them.
//
// Why a live sandbox and not "a work dir on disk + a fresh bwrap per command": a command then costs
// a fork instead of a sandbox start, files never touch the host disk or need a quota, and an idle
// session costs no CPU at all: its supervisor sits in read(2) and the prestarted interpreter in
// read(2). What it costs is memory (the benchmark's "sessions held"), which is why sessions are capped
// (maxSessions) and closed when idle.
import type { Logger } from "pino";
import type { SandboxExecRequest, SandboxExecResult, SandboxLanguage } from "../environments/api/sandbox.js";
import { gone, notFound, overloaded } from "./errors.js";
import type { WarmPool, PoolKind } from "./pool.js";
import { SandboxFailure, type SandboxProcess } from "./sandbox-process.js";
import type { SandboxSettings } from "./settings.js";

export interface SessionOptions {
  language?: SandboxLanguage;
  idleTimeoutMs?: number;
}

interface Session {
  id: string;
  kind: PoolKind;
  sandbox: SandboxProcess;
  idleMs: number;
  timer: NodeJS.Timeout | null;
  tail: Promise<unknown>;
  lost: string | null;
  running: boolean;
}

export interface SessionCounters {
  opened: number;
  closed: number;
  expired: number;
  lost: number;
  execs: number;
}

export class SessionManager {
  private readonly sessions = new Map<string, Session>();
  private readonly opening = new Map<string, Promise<void>>();
  readonly counters: SessionCounters = { opened: 0, closed: 0, expired: 0, lost: 0, execs: 0 };

  constructor(
    private readonly pool: WarmPool,
    private readonly settings: SandboxSettings,
    private readonly runInSandbox: (sandbox: SandboxProcess, req: SandboxExecRequest, next: PoolKind) => Promise<SandboxExecResult>,
    private readonly log: Logger,
  ) {}

  get size(): number {
    return this.sessions.size;
  }

  has(id: string): boolean {
    return this.sessions.has(id);
  }

  /** Opens a session; opening an id that is already open (a retried request) is not an error. */
  async open(id: string, opts: SessionOptions, kindOf: (lang: SandboxLanguage | undefined) => PoolKind): Promise<void> {
    const existing = this.sessions.get(id);
    if (existing) {
      this.touch(existing);
      return;
    }
    const pending = this.opening.get(id);
    if (pending) return pending;
    if (this.sessions.size + this.opening.size >= this.settings.maxSessions) {
      throw overloaded(`session limit reached (maxSessions=${this.settings.maxSessions}); close sessions or add sandbox replicas`);
    }
    const p = (async () => {
      const kind = kindOf(opts.language);
      const sandbox = await this.pool.acquire(kind);
      this.pool.detach(kind, sandbox);
      const idleMs = Math.min(opts.idleTimeoutMs ?? this.settings.sessionIdleMs, this.settings.maxSessionIdleMs);
      const s: Session = { id, kind, sandbox, idleMs, timer: null, tail: Promise.resolve(), lost: null, running: false };
      sandbox.onExit(() => {
        if (this.sessions.get(id) === s && !s.lost) {
          s.lost = "its sandbox died";
          this.counters.lost++;
          this.log.warn({ session: id }, "session sandbox died");
          this.forget(s);
        }
      });
      this.sessions.set(id, s);
      this.counters.opened++;
      this.touch(s);
    })();
    this.opening.set(id, p);
    try {
      await p;
    } finally {
      this.opening.delete(id);
    }
  }

  async exec(id: string, req: SandboxExecRequest): Promise<SandboxExecResult> {
    await this.opening.get(id);
    const s = this.sessions.get(id);
    if (!s) throw notFound(`no open session ${JSON.stringify(id)} on this replica (closed, expired, or never opened)`);
    const run = s.tail.then(async () => {
      if (s.lost) throw gone(`session ${id} is lost: ${s.lost}; its files are gone, open a new session`);
      if (s.timer) clearTimeout(s.timer);
      s.running = true;
      try {
        this.counters.execs++;
        return await this.runInSandbox(s.sandbox, req, s.kind);
      } catch (e) {
        // The sandbox died under the command: the session's files died with it.
        if (e instanceof SandboxFailure) throw gone(`session ${id} is lost: ${e.message}; open a new session`);
        throw e;
      } finally {
        s.running = false;
        if (!s.lost && this.sessions.get(id) === s) this.touch(s);
      }
    });
    s.tail = run.catch(() => undefined);
    return run;
  }

  close(id: string): boolean {
    const s = this.sessions.get(id);
    if (!s) return false;
    this.counters.closed++;
    this.forget(s);
    return true;
  }

  closeAll(): void {
    for (const s of [...this.sessions.values()]) this.forget(s);
  }

  private touch(s: Session): void {
    if (s.timer) clearTimeout(s.timer);
    s.timer = setTimeout(() => {
      if (s.running) return;
      this.counters.expired++;
      this.log.info({ session: s.id, idleMs: s.idleMs }, "session idle, closing");
      this.forget(s);
    }, s.idleMs);
    s.timer.unref();
  }

  private forget(s: Session): void {
    if (s.timer) clearTimeout(s.timer);
    s.timer = null;
    if (this.sessions.get(s.id) === s) this.sessions.delete(s.id);
    if (!s.lost) s.lost = "it was closed";
    s.sandbox.kill();
  }
}
