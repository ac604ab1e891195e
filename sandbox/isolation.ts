// How one sandbox is made: the bubblewrap command line, the read-only runtime folder it mounts at
// /.rs, and the host uid it runs under. The flags here are the isolation policy; probe.ts checks at
// start that they actually hold on this machine.
import { execFileSync } from "node:child_process";
import { chmodSync, copyFileSync, existsSync, lstatSync, mkdirSync, mkdtempSync, readdirSync, readlinkSync, rmSync, statSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { cpus } from "node:os";
import { buildExecutionFilter, buildSealFilter, buildSeccompFilter } from "./seccomp.js";
import { NODE_BOOT_JS, SUPERVISOR_PY } from "./supervisor-source.js";
import type { ResolvedRuntimes } from "./runtimes.js";
import type { SandboxSettings } from "./settings.js";

/** Inside-sandbox uid/gid of the program (conventionally "nobody"; /etc/passwd calls it "sandbox"). */
export const SANDBOX_UID = 65534;
export const WORK_DIR = "/workspace";

export interface IsolationFeatures {
  /** seccomp deny-list loaded (bwrap --seccomp). */
  seccomp: boolean;
  /** Nested user namespaces refused inside the sandbox (bwrap --disable-userns). */
  disableUserns: boolean;
  /** Each live sandbox runs under its own unprivileged host uid (needs root); else the service's uid. */
  perSandboxHostUid: boolean;
  /**
   * Each one-shot execution gets its own mount and ipc namespaces from the supervisor (made in the
   * supervisor's template user namespace, or with perExecutionUid in one of its own), with a fresh
   * /workspace, /tmp and /dev/shm (needs seccomp: the sandbox's filter then allows
   * unshare(2), setns(2) and mount(2) for the supervisor, and each execution's own filter refuses them).
   */
  freshNamespaces: boolean;
  /**
   * With freshNamespaces, as root: each one-shot execution runs under a host uid of its own (the service maps
   * a range of them into the sandbox's user namespace; the supervisor switches each execution's process to
   * the next one before it unshares).
   */
  perExecutionUid: boolean;
}

export function describeFeatures(f: IsolationFeatures, uidRange?: [number, number]): string[] {
  return [
    "namespaces: user, mount, pid (supervisor is pid 1), network (loopback only), ipc, uts, cgroup (when the kernel has it)",
    "capabilities: none (--cap-drop ALL); no_new_privs; new session (no terminal injection)",
    "filesystem: read-only /usr and minimal /etc; private size-capped tmpfs /workspace, /tmp, /dev/shm; root and /dev read-only",
    f.seccomp ? "seccomp: deny-list on (ptrace, bpf, io_uring, keyrings, mount, namespaces, ...)" : "seccomp: OFF",
    f.disableUserns
      ? "nested user namespaces: disabled"
      : "nested user namespaces: not disabled by bwrap" + (f.seccomp ? " (seccomp still refuses them to programs)" : ""),
    f.freshNamespaces
      ? "per execution: fresh user, mount and ipc namespaces, a fresh tmpfs /workspace, /tmp and /dev/shm, capabilities dropped, unshare and mount refused"
      : "per execution: a fresh process in the sandbox's namespaces; /workspace, /tmp and /dev/shm emptied after it",
    ...(f.perExecutionUid
      ? [
          "per execution: a host uid of its own, not the sandbox's (switched by the supervisor, which keeps CAP_SETUID, CAP_SETGID, CAP_KILL and CAP_SYS_RESOURCE in the sandbox's user namespace only; every execution drops them)",
        ]
      : []),
    f.perSandboxHostUid && uidRange
      ? `host uid: one unprivileged uid per live sandbox from ${uidRange[0]}..${uidRange[1] - 1} (RLIMIT_NPROC per sandbox, no cross-sandbox signals or files)`
      : `host uid: the service's own unprivileged uid ${process.getuid?.() ?? "?"} (per-sandbox uids need root; RLIMIT_NPROC then counts the service's processes too)`,
    "limits: RLIMIT_CPU/DATA/AS/FSIZE/NPROC/NOFILE/CORE per command; wall clock and output caps enforced by the supervisor, with a host backstop",
  ];
}

/** Files every sandbox mounts read-only at /.rs, written once per service instance. */
export class RuntimeFolder {
  readonly dir: string;
  readonly seccompPath: string | null;
  /** That per-execution filter, hex, for the supervisor's environment. */
  readonly executionFilterHex: string | null;
  /** The filter the supervisor loads on itself once it pinned its hot pages (buildSealFilter), hex. */
  readonly sealFilterHex: string | null;
  /** The sandbox-wide filter's variants (seccompPathFor), by "fresh namespaces, pins at start". */
  private readonly filterPaths = new Map<string, string>();
  private readonly base: string;

  /** nodeForkSo: the node fork server's addon, null when no node is served. */
  constructor(workRoot: string, forkLoopSo: string, nodeForkSo: string | null) {
    mkdirSync(workRoot, { recursive: true, mode: 0o711 });
    RuntimeFolder.removeStale(workRoot);
    this.base = mkdtempSync(join(workRoot, `svc-${process.pid}-`));
    // Traversable, not listable: sandboxes run under other uids and must reach rt/ only.
    chmodSync(this.base, 0o711);
    this.dir = join(this.base, "rt");
    mkdirSync(join(this.dir, "etc"), { recursive: true });
    writeFileSync(join(this.dir, "supervisor.py"), SUPERVISOR_PY, { mode: 0o644 });
    writeFileSync(join(this.dir, "boot.js"), NODE_BOOT_JS, { mode: 0o644 });
    copyFileSync(forkLoopSo, join(this.dir, "forkserver.so"));
    if (nodeForkSo) copyFileSync(nodeForkSo, join(this.dir, "nodefork.node"));
    const etc = (name: string, text: string) => writeFileSync(join(this.dir, "etc", name), text, { mode: 0o644 });
    etc("passwd", `root:x:0:0:root:/nonexistent:/usr/sbin/nologin\nsandbox:x:${SANDBOX_UID}:${SANDBOX_UID}:sandbox:${WORK_DIR}:/bin/sh\n`);
    etc("group", `root:x:0:\nsandbox:x:${SANDBOX_UID}:\n`);
    etc("hosts", "127.0.0.1 localhost sandbox\n::1 localhost ip6-localhost\n");
    etc("hostname", "sandbox\n");
    etc("nsswitch.conf", "passwd: files\ngroup: files\nhosts: files\n");
    for (const d of [this.dir, join(this.dir, "etc")]) chmodSync(d, 0o755);
    // The filters stay root-only: bwrap gets one as an open fd, the sandbox never sees the file.
    for (const freshNamespaces of [false, true])
      for (const pinAtStart of [false, true]) {
        const filter = buildSeccompFilter({ freshNamespaces, pinAtStart });
        if (!filter) continue;
        const path = join(this.base, `seccomp${freshNamespaces ? "-fresh" : ""}${pinAtStart ? "-pin" : ""}.bpf`);
        writeFileSync(path, filter, { mode: 0o600 });
        this.filterPaths.set(`${freshNamespaces},${pinAtStart}`, path);
      }
    this.seccompPath = this.seccompPathFor(false, false);
    this.executionFilterHex = buildExecutionFilter()?.toString("hex") ?? null;
    this.sealFilterHex = buildSealFilter()?.toString("hex") ?? null;
  }

  /**
   * The sandbox-wide filter for bwrap: with unshare(2), setns(2) and mount(2) left to each execution's own filter
   * (freshNamespaces), io_uring_setup(2) and io_uring_register(2) to the sandbox's start (pinsHotPages).
   */
  seccompPathFor(freshNamespaces: boolean, pinAtStart: boolean): string | null {
    return this.filterPaths.get(`${freshNamespaces},${pinAtStart}`) ?? null;
  }

  remove(): void {
    rmSync(this.base, { recursive: true, force: true });
  }

  /** Folders left by services that were killed (their pid is in the name and no longer runs). */
  private static removeStale(workRoot: string): void {
    for (const name of readdirSync(workRoot)) {
      const m = /^svc-(\d+)-/.exec(name);
      if (!m) continue;
      try {
        process.kill(Number(m[1]), 0);
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code === "ESRCH") rmSync(join(workRoot, name), { recursive: true, force: true });
      }
    }
  }
}

export function findBwrap(): string {
  for (const p of ["/usr/bin/bwrap", "/usr/local/bin/bwrap", "/bin/bwrap"]) if (existsSync(p)) return p;
  for (const dir of (process.env.PATH ?? "").split(":")) if (dir && existsSync(join(dir, "bwrap"))) return join(dir, "bwrap");
  throw new Error("sandbox: bubblewrap (bwrap) is not installed; install it (Debian/Ubuntu: `apt-get install bubblewrap`, or run scripts/setup.sh)");
}

export function bwrapVersion(bwrap: string): string {
  try {
    return execFileSync(bwrap, ["--version"], { encoding: "utf8", timeout: 5000 }).trim();
  } catch {
    return "unknown";
  }
}

export interface SandboxLayout {
  bwrap: string;
  runtime: RuntimeFolder;
  runtimes: ResolvedRuntimes;
  /** Host folders bound read-only at the same path (interpreter prefixes outside /usr). */
  extraBinds: string[];
  features: IsolationFeatures;
  settings: SandboxSettings;
}

/** First stdio slot after stdin/out/err and the two control channels (3: host->sandbox, 4: sandbox->host). */
export const SECCOMP_FD = 5;
/** perExecutionUid: bwrap writes its sandbox's pid here (--info-fd), then waits on the next for the uid maps. */
export const INFO_FD = 6;
export const USERNS_BLOCK_FD = 7;

/** Inside the sandbox's user namespace, the per-execution uids (and gids) start here; each maps to a host uid of its own. */
export const EXEC_ID_BASE = 100_000;
const MAX_EXEC_IDS = 4096;

/** How many per-execution uids a sandbox has: one per execution of its life, up to 4096 (then reused in turn). */
export function execIdsPerSandbox(settings: SandboxSettings): number {
  return Math.min(settings.maxExecsPerSandbox, MAX_EXEC_IDS);
}

/** The host uids (and gids) the executions of the sandbox running under `sandboxHostUid` get: [first, first + count). */
export function execUidRange(settings: SandboxSettings, sandboxHostUid: number): { first: number; count: number } {
  const count = execIdsPerSandbox(settings);
  const iso = settings.isolation;
  return { first: iso.execUidBase + (sandboxHostUid - iso.hostUidBase) * count, count };
}

/**
 * The sandbox's uid_map (and gid_map), written by this process (root) while bwrap waits: the program's
 * usual uid is the sandbox's host uid, as without perExecutionUid, and the per-execution ones follow.
 */
export function sandboxIdMap(settings: SandboxSettings, sandboxHostUid: number): string {
  const { first, count } = execUidRange(settings, sandboxHostUid);
  return `${SANDBOX_UID} ${sandboxHostUid} 1\n${EXEC_ID_BASE} ${first} ${count}\n`;
}

/** Refuses, in one line, per-execution uid ranges that leave the uid space or overlap the sandboxes' own uids. */
export function assertExecUidRanges(settings: SandboxSettings): void {
  const iso = settings.isolation;
  const lo = iso.execUidBase;
  const hi = lo + iso.hostUidCount * execIdsPerSandbox(settings);
  if (hi > 4_294_967_294)
    throw new Error(`sandbox settings.isolation: per-execution uids [${lo}, ${hi}) pass the last uid 4294967294; lower execUidBase or hostUidCount`);
  if (lo < iso.hostUidBase + iso.hostUidCount && iso.hostUidBase < hi)
    throw new Error(
      `sandbox settings.isolation: per-execution uids [${lo}, ${hi}) overlap the sandboxes' uids [${iso.hostUidBase}, ${iso.hostUidBase + iso.hostUidCount}); move execUidBase`,
    );
}

/**
 * bwrap runs under an unprivileged uid and must reach what it binds by path: every folder above an
 * extra bind must be world-traversable (a pyenv under /root, mode 0700, is not). Throws naming the
 * folder to fix rather than failing later with bwrap's "Permission denied".
 */
export function assertReachableByOthers(path: string): void {
  let p = path;
  for (;;) {
    const st = statSync(p);
    const need = p === path ? 0o005 : 0o001;
    if ((st.mode & need) !== need) {
      throw new Error(
        `sandbox: ${path} must be readable by the sandbox's unprivileged uid, but ${p} is mode ${(st.mode & 0o777).toString(8)}; ` +
          `run \`chmod o+x ${p}\` (or o+rx for the folder itself), or use an interpreter under /usr (sandbox.runtimes.*.binary)`,
      );
    }
    if (p === "/") return;
    p = dirname(p);
  }
}

const MiB = 1024 * 1024;

/** "0-2,5" -> "0,1,2,5" (what the supervisor passes to sched_setaffinity); "" for every CPU. */
export function cpuList(spec: string | undefined): string {
  if (!spec) return "";
  const cpus: number[] = [];
  for (const part of spec.split(",")) {
    const [lo, hi] = part.split("-").map(Number) as [number, number | undefined];
    for (let c = lo; c <= (hi ?? lo); c++) cpus.push(c);
  }
  return cpus.join(",");
}

/** Refuses, in one line, a CPU list naming CPUs this machine lacks (before any sandbox starts). */
export function assertCpusExist(spec: string | undefined, available = cpus().length): void {
  if (!spec) return;
  const missing = cpuList(spec)
    .split(",")
    .map(Number)
    .filter((c) => c >= available);
  if (missing.length) throw new Error(`sandbox settings.cpus "${spec}" names CPU ${missing.join(", ")}, but this machine has CPUs 0-${available - 1}`);
}

/** The bwrap argument vector for one sandbox whose supervisor prestarts `prestart` ("python"/"node"/""). */
export function bwrapArgs(layout: SandboxLayout, prestart: string): string[] {
  const { features, settings, runtimes, runtime } = layout;
  const iso = settings.isolation;
  const a: string[] = ["--unshare-user", "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"];
  if (features.disableUserns) a.push("--disable-userns");
  a.push(
    "--die-with-parent",
    "--new-session",
    "--as-pid-1",
    "--cap-drop",
    "ALL",
    // perExecutionUid: the supervisor switches each execution to its uid, sets its rlimits (prlimit) and kills
    // what runs under it.
    ...(features.perExecutionUid ? ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--cap-add", "CAP_KILL", "--cap-add", "CAP_SYS_RESOURCE"] : []),
    "--uid",
    String(SANDBOX_UID),
    "--gid",
    String(SANDBOX_UID),
    "--hostname",
    "sandbox",
    "--clearenv",
    "--setenv",
    "PATH",
    "/usr/local/bin:/usr/bin:/bin",
    "--setenv",
    "HOME",
    WORK_DIR,
    "--setenv",
    "TMPDIR",
    "/tmp",
    "--setenv",
    "USER",
    "sandbox",
    "--setenv",
    "LOGNAME",
    "sandbox",
    "--setenv",
    "LANG",
    "C.UTF-8",
    "--setenv",
    "PYTHONDONTWRITEBYTECODE",
    "1",
    ...freshNamespaceEnv(layout),
    ...sealEnv(layout),
    ...(features.perExecutionUid
      ? [
          "--setenv",
          "RS_EXEC_IDS",
          `${EXEC_ID_BASE}:${execIdsPerSandbox(settings)}`,
          "--info-fd",
          String(INFO_FD),
          "--userns-block-fd",
          String(USERNS_BLOCK_FD),
        ]
      : []),
    "--ro-bind",
    "/usr",
    "/usr",
  );
  for (const top of ["/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32"]) {
    let st;
    try {
      st = lstatSync(top);
    } catch {
      continue;
    }
    if (st.isSymbolicLink()) a.push("--symlink", readlinkSync(top), top);
    else if (st.isDirectory()) a.push("--ro-bind", top, top);
  }
  // Only what the dynamic loader and libc need from /etc; passwd/group/hosts are our own stubs. /etc itself
  // readable by all: bwrap would make it 0700, closed to the per-execution uids (perExecutionUid).
  a.push("--perms", "0755", "--dir", "/etc");
  for (const f of ["/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives", "/etc/localtime"]) {
    a.push("--ro-bind-try", f, f);
  }
  for (const f of ["passwd", "group", "hosts", "hostname", "nsswitch.conf"]) a.push("--ro-bind", join(runtime.dir, "etc", f), `/etc/${f}`);
  a.push("--ro-bind", runtime.dir, "/.rs");
  for (const p of layout.extraBinds) a.push("--ro-bind", p, p);
  a.push(
    "--proc",
    "/proc",
    "--dev",
    "/dev",
    "--perms",
    "1777",
    "--size",
    String(iso.shmMb * MiB),
    "--tmpfs",
    "/dev/shm",
    "--perms",
    "1777",
    "--size",
    String(iso.diskMb * MiB),
    "--tmpfs",
    "/tmp",
    "--perms",
    "0700",
    "--size",
    String(iso.diskMb * MiB),
    "--tmpfs",
    WORK_DIR,
    // bwrap's root and /dev are tmpfs without a size: read-only, so nothing can fill host memory there.
    "--remount-ro",
    "/dev",
    "--remount-ro",
    "/",
    "--chdir",
    WORK_DIR,
  );
  if (features.seccomp) a.push("--seccomp", String(SECCOMP_FD));
  // "reuse": a sandbox that serves many commands preloads more modules (supervisor.py's PRELOAD_REUSED).
  const reuse = layout.settings.maxExecsPerSandbox > 1 ? "reuse" : "";
  a.push("--", runtimes.python.binary, "-I", "-S", "-B", "/.rs/supervisor.py", runtimes.node?.binary ?? "", prestart, cpuList(layout.settings.cpus), reuse);
  return a;
}

/**
 * What the supervisor needs to give each execution fresh namespaces: the tmpfs mounts to make (path, mode,
 * bytes; as bwrap makes the sandbox's own) and the per-execution seccomp filter. The supervisor removes
 * both from its environment before any program runs.
 */
function freshNamespaceEnv(layout: SandboxLayout): string[] {
  const { features, settings, runtime } = layout;
  if (!features.freshNamespaces || !runtime.executionFilterHex) return [];
  const iso = settings.isolation;
  const mounts = [
    ["/dev/shm", "1777", iso.shmMb * MiB],
    ["/tmp", "1777", iso.diskMb * MiB],
    [WORK_DIR, "700", iso.diskMb * MiB],
  ]
    .map((m) => m.join(":"))
    .join(";");
  return ["--setenv", "RS_FRESH_MOUNTS", mounts, "--setenv", "RS_EXEC_SECCOMP", runtime.executionFilterHex];
}

/**
 * Whether this sandbox pins, at its start, the pages its executions write (supervisor/pin-hot.h): one that serves
 * many commands. Its sandbox-wide filter then leaves io_uring_setup(2) and io_uring_register(2) to that start
 * (seccompPathFor), and the seal (sealEnv) takes them away before it serves anything: sandbox/README.md, "io_uring
 * at a sandbox's start".
 */
export function pinsHotPages(layout: SandboxLayout): boolean {
  return layout.settings.maxExecsPerSandbox > 1;
}

/** The seal pid 1 loads on itself (and hands its node fork server) wherever the sandbox's filter leaves io_uring to its start. */
function sealEnv(layout: SandboxLayout): string[] {
  const seal = pinsHotPages(layout) && layout.features.seccomp ? layout.runtime.sealFilterHex : null;
  return seal ? ["--setenv", "RS_SEAL_SECCOMP", seal] : [];
}

/** Hands out host uids so that no two live sandboxes share one (FIFO reuse maximises the gap). */
export class HostUidPool {
  private free: number[] = [];
  private next: number;

  constructor(
    private readonly base: number,
    private readonly count: number,
  ) {
    this.next = base;
  }

  acquire(): number {
    if (this.next < this.base + this.count) return this.next++;
    const uid = this.free.shift();
    if (uid === undefined) throw new Error(`sandbox: all ${this.count} host uids are in use (raise sandbox.isolation.hostUidCount)`);
    return uid;
  }

  release(uid: number): void {
    this.free.push(uid);
  }
}
