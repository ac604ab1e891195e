// The sandbox executor without NATS: probes isolation, keeps the warm pool and the sessions, bounds
// concurrency, and turns requests into sandboxed commands. The NATS service is a thin shell around it,
// and tests or an in-process deployment can use it directly (see createLocalSandbox).
import type { Logger } from "pino";
import {
  caseVerdict,
  SKIPPED,
  type CodeSandbox,
  type SandboxBatchRequest,
  type SandboxBatchResult,
  type SandboxCaseResult,
  type SandboxExecRequest,
  type SandboxExecResult,
  type SandboxLanguage,
  type SandboxSession,
} from "../environments/api/sandbox.js";
import { badRequest, overloaded } from "./errors.js";
import {
  bwrapVersion,
  describeFeatures,
  findBwrap,
  assertExecUidRanges,
  HostUidPool,
  assertReachableByOthers,
  assertCpusExist,
  RuntimeFolder,
  pinsHotPages,
  type IsolationFeatures,
  type SandboxLayout,
} from "./isolation.js";
import { resolveLimits, toRlimits } from "./limits.js";
import { WarmPool, type PoolKind } from "./pool.js";
import { featureCandidates, probeIsolation } from "./probe.js";
import { resolveRuntimes, type ResolvedRuntimes } from "./runtimes.js";
import { SandboxProcess } from "./sandbox-process.js";
import { buildSeccompFilter } from "./seccomp.js";
import { QueueFullError, Semaphore } from "./semaphore.js";
import { SessionManager, type SessionOptions } from "./sessions.js";
import { parseSandboxSettings, type SandboxSettings, type SandboxSettingsInput } from "./settings.js";
import { assertCanSpawn } from "./native-spawn.js";
import { forkLoopLibrary, nodeForkLibrary } from "./supervisor-source.js";

export interface IsolationReport {
  features: IsolationFeatures;
  /** Human-readable lines: what is in force and why. */
  lines: string[];
  bwrap: string;
  runtimes: { python: string; node: string | null; bash: boolean };
  rejected: Array<{ features: IsolationFeatures; why: string }>;
}

interface ExecCounters {
  execs: number;
  failures: number;
  timeouts: number;
  outOfMemory: number;
  outputTruncated: number;
  rejectedOverload: number;
  batches: number;
  batchCases: number;
}

export class SandboxExecutor {
  private readonly slots: Semaphore;
  private readonly pool: WarmPool;
  private readonly sessions: SessionManager;
  private readonly live = new Set<SandboxProcess>();
  private readonly counters: ExecCounters = {
    execs: 0,
    failures: 0,
    timeouts: 0,
    outOfMemory: 0,
    outputTruncated: 0,
    rejectedOverload: 0,
    batches: 0,
    batchCases: 0,
  };
  private outputCeiling = Infinity;
  private closed = false;

  private constructor(
    readonly settings: SandboxSettings,
    readonly isolation: IsolationReport,
    private readonly layout: SandboxLayout,
    private readonly uidPool: HostUidPool | null,
    private readonly runtimes: ResolvedRuntimes,
    readonly log: Logger,
  ) {
    this.slots = new Semaphore(settings.maxConcurrent, settings.maxQueued);
    const targets: Record<PoolKind, number> = { python: settings.runtimes.python.poolSize ?? settings.poolSize, node: 0 };
    if (runtimes.node) targets.node = settings.runtimes.node.poolSize ?? settings.poolSize;
    this.pool = new WarmPool(
      (kind) => this.startSandbox(kind),
      {
        targets,
        // Each running one-shot command holds one sandbox; never more than there are slots.
        maxOwned: Math.max(settings.maxConcurrent, targets.python, targets.node),
        maxParallelStarts: settings.maxParallelStarts,
        maxExecsPerSandbox: settings.maxExecsPerSandbox,
        settleMs: settings.settleMs,
      },
      log,
    );
    this.sessions = new SessionManager(this.pool, settings, (sb, req, next) => this.runOn(sb, req, next), log);
  }

  /**
   * Checks the machine (bwrap, interpreters, which isolation holds), writes the runtime folder and
   * fills the warm pool. Throws, naming the problem, when code cannot be run safely here.
   */
  static async create(input: SandboxSettings | SandboxSettingsInput, log: Logger): Promise<SandboxExecutor> {
    const settings = parseSandboxSettings(input);
    assertCpusExist(settings.cpus);
    const bwrap = findBwrap();
    const runtimes = resolveRuntimes(settings);
    const forkLoop = forkLoopLibrary();
    const nodeFork = runtimes.node ? nodeForkLibrary() : null;
    const runtime = new RuntimeFolder(settings.workRoot, forkLoop, nodeFork);
    const extraBinds = [...new Set([...runtimes.python.extraBinds, ...(runtimes.node?.extraBinds ?? [])])];
    try {
      const canSetUid = process.getuid?.() === 0;
      assertCanSpawn(canSetUid);
      if (canSetUid) for (const p of extraBinds) assertReachableByOthers(p);
      const iso = settings.isolation;
      const uidPool = canSetUid ? new HostUidPool(iso.hostUidBase, iso.hostUidCount) : null;
      const candidates = featureCandidates({
        seccompAvailable: runtime.seccompPath !== null && buildSeccompFilter() !== null,
        seccompMode: iso.seccomp,
        canSetUid,
        freshNamespaces: iso.freshNamespaces && runtime.executionFilterHex !== null,
        perExecutionUid: iso.perExecutionUid,
      });
      if (iso.freshNamespaces && iso.perExecutionUid && canSetUid) assertExecUidRanges(settings);
      const outcome = await probeIsolation({ bwrap, runtime, runtimes, extraBinds, settings }, candidates, uidPool, log);
      const layout: SandboxLayout = { bwrap, runtime, runtimes, extraBinds, features: outcome.features, settings };
      const report: IsolationReport = {
        features: outcome.features,
        lines: [
          ...describeFeatures(outcome.features, uidPool ? [iso.hostUidBase, iso.hostUidBase + iso.hostUidCount] : undefined),
          pinsHotPages(layout)
            ? "hot pages: each reused sandbox's pid 1 pins the pages a python execution writes, its node fork server those a node execution writes (copied at fork, not faulted in); each seals io_uring off before serving"
            : "hot pages: not pinned (maxExecsPerSandbox: 1)",
          ...(settings.cpus ? [`CPUs: ${settings.cpus} (settings.cpus)`] : []),
        ],
        bwrap: bwrapVersion(bwrap),
        runtimes: {
          python: `${runtimes.python.binary} (${runtimes.python.version})`,
          node: runtimes.node ? `${runtimes.node.binary} (${runtimes.node.version})` : null,
          bash: runtimes.bash !== null,
        },
        rejected: outcome.rejected,
      };
      log.info({ isolation: report.lines, bwrap: report.bwrap, runtimes: report.runtimes, rejected: report.rejected }, "sandbox isolation in force");
      const ex = new SandboxExecutor(settings, report, layout, outcome.features.perSandboxHostUid ? uidPool : null, runtimes, log);
      await ex.pool.warm();
      return ex;
    } catch (e) {
      runtime.remove();
      throw e;
    }
  }

  /** Output caps are kept under this (the service sets it from the server's max_payload). */
  setOutputCeiling(bytes: number): void {
    this.outputCeiling = Math.max(1024, bytes);
  }

  private async startSandbox(kind: PoolKind): Promise<SandboxProcess> {
    const sb = await SandboxProcess.start(this.layout, kind, this.uidPool);
    this.live.add(sb);
    sb.onExit(() => this.live.delete(sb));
    if (this.closed) sb.kill();
    return sb;
  }

  private kindOf(lang: SandboxLanguage | undefined): PoolKind {
    return lang === "node" ? "node" : "python";
  }

  private checkLanguage(lang: SandboxLanguage): void {
    if (lang === "node" && !this.runtimes.node) throw badRequest("language node is not available on this sandbox host (sandbox.runtimes.node)");
    if (lang === "bash" && !this.runtimes.bash) throw badRequest("language bash is not available on this sandbox host (no /bin/bash)");
  }

  private async withSlot<T>(fn: () => Promise<T>): Promise<T> {
    if (this.closed) throw overloaded("the sandbox service is stopping");
    let release: () => void;
    try {
      release = await this.slots.acquire();
    } catch (e) {
      if (e instanceof QueueFullError) {
        this.counters.rejectedOverload++;
        throw overloaded(`sandbox replica over capacity: ${e.message}`);
      }
      throw e;
    }
    try {
      return await fn();
    } finally {
      release();
    }
  }

  /** Runs one command on a sandbox (inside a concurrency slot the caller holds) and counts the outcome. */
  private async runCommand(
    sandbox: SandboxProcess,
    req: SandboxExecRequest,
    next: PoolKind | "",
    once = false,
    outputCeiling = this.outputCeiling,
  ): Promise<SandboxExecResult> {
    const limits = resolveLimits(this.settings, req.limits, outputCeiling);
    this.counters.execs++;
    try {
      const r = await sandbox.run({
        language: req.language,
        code: req.code,
        stdin: req.stdin,
        files: req.files,
        limits,
        rlimits: toRlimits(limits, req.language, this.settings.isolation.addressSpaceHeadroomMb),
        next: next === "node" && !this.runtimes.node ? "" : next,
        once,
      });
      if (r.timedOut) this.counters.timeouts++;
      if (r.outOfMemory) this.counters.outOfMemory++;
      if (r.outputTruncated) this.counters.outputTruncated++;
      return r;
    } catch (e) {
      this.counters.failures++;
      throw e;
    }
  }

  private runOn(sandbox: SandboxProcess, req: SandboxExecRequest, next: PoolKind): Promise<SandboxExecResult> {
    this.checkLanguage(req.language);
    return this.withSlot(() => this.runCommand(sandbox, req, next));
  }

  private get reuse(): boolean {
    return this.settings.maxExecsPerSandbox > 1;
  }

  /**
   * One-shot execution on a pool sandbox: a fresh process forked from its warm interpreter, in a work
   * dir the previous command's reset emptied. The sandbox goes back to the pool only if its reset after
   * this command was clean (else, and without reuse, it is killed and replaced).
   */
  async exec(req: SandboxExecRequest): Promise<SandboxExecResult> {
    this.checkLanguage(req.language);
    const kind = this.kindOf(req.language);
    return this.withSlot(async () => {
      const sandbox = await this.pool.acquire(kind);
      try {
        return await this.runCommand(sandbox, req, this.reuse ? kind : "", this.reuse);
      } finally {
        this.pool.release(kind, sandbox);
      }
    });
  }

  /**
   * One program against many inputs: one concurrency slot and one sandbox for the whole batch, each case
   * a one-shot command on it (fresh process, emptied work dir). A case whose reset is not clean costs the
   * sandbox; the next case runs on another. Cases that cannot start within batchWallMs are skipped.
   */
  async execBatch(req: SandboxBatchRequest): Promise<SandboxBatchResult> {
    this.checkLanguage(req.language);
    const kind = this.kindOf(req.language);
    const n = req.cases.length;
    if (n === 0) throw badRequest("a batch needs at least one case");
    const base = resolveLimits(this.settings, req.limits, this.outputCeiling);
    const budgetMs = Math.min(req.batchWallMs ?? base.wallMs * n, this.settings.maxLimits.wallMs * 2);
    // stdout and stderr of every case share one reply.
    const ceiling = Math.max(1024, Math.floor(this.outputCeiling / n));
    this.counters.batches++;
    return this.withSlot(async () => {
      const t0 = performance.now();
      const deadline = t0 + budgetMs;
      const results: SandboxCaseResult[] = [];
      let sandbox: SandboxProcess | null = null;
      let stop = false;
      try {
        for (const c of req.cases) {
          const left = Math.floor(deadline - performance.now());
          if (stop || left < 1) {
            results.push({ ...SKIPPED });
            continue;
          }
          sandbox ??= await this.pool.acquire(kind);
          const limits = { ...req.limits, wallMs: Math.min(base.wallMs, left) };
          this.counters.batchCases++;
          const r = await this.runCommand(
            sandbox,
            { language: req.language, code: req.code, stdin: c.stdin, files: req.files, limits },
            this.reuse ? kind : "",
            this.reuse,
            ceiling,
          );
          const verdict = caseVerdict(r, c.expectedStdout);
          results.push({ ...r, verdict });
          if (req.stopOnFailure && verdict !== "passed") stop = true;
          // The next case needs the reset done (it says whether the sandbox may serve again).
          if (this.reuse) await sandbox.settled();
          if (!this.reuse || !sandbox.clean) {
            this.pool.release(kind, sandbox);
            sandbox = null;
          }
        }
      } finally {
        if (sandbox) this.pool.release(kind, sandbox);
      }
      return { results, passed: results.filter((r) => r.verdict === "passed").length, wallMs: Math.round((performance.now() - t0) * 1000) / 1000 };
    });
  }

  async openSession(id: string, opts: SessionOptions = {}): Promise<void> {
    if (this.closed) throw overloaded("the sandbox service is stopping");
    if (opts.language) this.checkLanguage(opts.language);
    await this.sessions.open(id, opts, (l) => this.kindOf(l));
  }

  sessionExec(id: string, req: SandboxExecRequest): Promise<SandboxExecResult> {
    return this.sessions.exec(id, req);
  }

  closeSession(id: string): boolean {
    return this.sessions.close(id);
  }

  hasSession(id: string): boolean {
    return this.sessions.has(id);
  }

  /** Host pids of the live sandboxes' bwrap processes (diagnostics, tests). */
  sandboxPids(): number[] {
    return [...this.live].map((sb) => sb.pid).filter((p): p is number => p !== undefined);
  }

  stats(): Record<string, number> {
    const p = this.pool.counters;
    const s = this.sessions.counters;
    const f = this.isolation.features;
    return {
      running: this.slots.running,
      queued: this.slots.queued,
      live_sandboxes: this.live.size,
      pool_idle_python: this.pool.idleCount("python"),
      pool_idle_node: this.pool.idleCount("node"),
      pool_starting: this.pool.startingCount("python") + this.pool.startingCount("node"),
      pool_busy: this.pool.busyCount("python") + this.pool.busyCount("node"),
      pool_hits_total: p.hits,
      pool_reuses_total: p.reuses,
      sandboxes_retired_unclean_total: p.retiredUnclean,
      sandboxes_retired_worn_total: p.retiredWorn,
      pool_misses_total: p.misses,
      sandboxes_started_total: p.started,
      sandbox_start_failures_total: p.startFailures,
      sandbox_start_ms_avg: p.started ? Math.round((p.startMsTotal / p.started) * 10) / 10 : 0,
      resets_after_reply_total: p.resetsAfterReply,
      reset_after_reply_ms_avg: p.resetsAfterReply ? Math.round((p.resetAfterReplyMsTotal / p.resetsAfterReply) * 1000) / 1000 : 0,
      execs_total: this.counters.execs,
      batches_total: this.counters.batches,
      batch_cases_total: this.counters.batchCases,
      exec_failures_total: this.counters.failures,
      timeouts_total: this.counters.timeouts,
      out_of_memory_total: this.counters.outOfMemory,
      output_truncated_total: this.counters.outputTruncated,
      rejected_overload_total: this.counters.rejectedOverload,
      sessions_open: this.sessions.size,
      sessions_opened_total: s.opened,
      sessions_closed_total: s.closed,
      sessions_expired_total: s.expired,
      sessions_lost_total: s.lost,
      session_execs_total: s.execs,
      isolation_seccomp: f.seccomp ? 1 : 0,
      isolation_disable_userns: f.disableUserns ? 1 : 0,
      isolation_fresh_namespaces: f.freshNamespaces ? 1 : 0,
      isolation_per_execution_uid: f.perExecutionUid ? 1 : 0,
      isolation_per_sandbox_uid: f.perSandboxHostUid ? 1 : 0,
    };
  }

  /** Waits up to `ms` for running and queued commands to finish. */
  async drain(ms: number): Promise<void> {
    const deadline = Date.now() + ms;
    while (Date.now() < deadline && (this.slots.running > 0 || this.slots.queued > 0)) await new Promise((r) => setTimeout(r, 20));
  }

  /** Kills every sandbox (pool, sessions, running commands) and removes the runtime folder. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.pool.close();
    this.sessions.closeAll();
    const all = [...this.live];
    for (const sb of all) sb.kill();
    await Promise.race([Promise.all(all.map((sb) => sb.exited)), new Promise((r) => setTimeout(r, 5000))]);
    this.layout.runtime.remove();
  }
}

/** A CodeSandbox backed by an in-process executor (no NATS): tests, and single-process deployments. */
export function createLocalSandbox(executor: SandboxExecutor): CodeSandbox {
  let n = 0;
  return {
    exec: (req) => executor.exec(req),
    execBatch: (req) => executor.execBatch(req),
    async openSession(opts) {
      const id = `local-${process.pid}-${++n}`;
      await executor.openSession(id, { language: opts?.language, idleTimeoutMs: opts?.idleTimeoutMs });
      const session: SandboxSession = {
        id,
        exec: (req) => executor.sessionExec(id, req),
        async close() {
          executor.closeSession(id);
        },
      };
      return session;
    },
  };
}
