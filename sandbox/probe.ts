// Start-up self-test: runs a probe program inside a real sandbox and checks, from the inside, that
// the isolation we ask bwrap for is what we get. Flags that this kernel or bwrap refuse are dropped
// one at a time, strongest combination first; the namespaces themselves are never optional: if
// they cannot be had, the service refuses to start rather than run code unsandboxed.
import type { Logger } from "pino";
import { EXEC_ID_BASE, SANDBOX_UID, type HostUidPool, type IsolationFeatures, type SandboxLayout } from "./isolation.js";
import { resolveLimits, toRlimits } from "./limits.js";
import { SandboxProcess } from "./sandbox-process.js";

const PROBE_PY = `
import os, json, socket, ctypes
f = {}
f["uid"] = os.getuid()
f["procPids"] = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
f["pid1"] = open("/proc/1/comm").read().strip() if os.path.exists("/proc/1/comm") else ""
st = {}
for line in open("/proc/self/status").read().splitlines():
    k, _, v = line.partition(":")
    st[k] = v.strip()
f["capEff"] = int(st.get("CapEff", "ff"), 16)
f["capPrm"] = int(st.get("CapPrm", "ff"), 16)
f["capAmb"] = int(st.get("CapAmb", "ff"), 16)
f["capBnd"] = int(st.get("CapBnd", "ff"), 16)
f["noNewPrivs"] = st.get("NoNewPrivs")
f["seccomp"] = st.get("Seccomp")
f["netDevs"] = [l.split(":")[0].strip() for l in open("/proc/net/dev").read().splitlines()[2:]]
s = socket.socket()
s.settimeout(0.3)
try:
    s.connect(("192.0.2.1", 9))
    f["outbound"] = "connected"
except OSError as e:
    f["outbound"] = "refused:%s" % (e.errno,)
libc = ctypes.CDLL(None, use_errno=True)
f["unshareUser"] = libc.unshare(0x10000000) == 0
_ring = libc.syscall(425, 1, ctypes.create_string_buffer(120)) if os.uname().machine in ("x86_64", "aarch64") else -1
f["ioUring"] = _ring >= 0
if _ring >= 0:
    os.close(_ring)
f["visible"] = [p for p in HIDDEN if os.path.exists(p)]
def writable(p):
    try:
        open(p, "w").close()
        return True
    except OSError:
        return False
f["rootWritable"] = writable("/rs-probe")
f["usrWritable"] = writable("/usr/rs-probe")
f["workWritable"] = writable("/workspace/rs-probe")
f["uidMap"] = open("/proc/self/uid_map").read().split()
f["workspaceMounts"] = sum(1 for l in open("/proc/self/mountinfo") if l.split()[4] == "/workspace")
print(json.dumps(f))
`;

export interface ProbeFacts {
  uid: number;
  procPids: number[];
  pid1: string;
  capEff: number;
  capPrm: number;
  capAmb: number;
  capBnd: number;
  noNewPrivs: string;
  seccomp: string;
  netDevs: string[];
  outbound: string;
  unshareUser: boolean;
  /** io_uring_setup(2) succeeded (the sandbox's filter refuses it, or, in a reused sandbox, the seal). */
  ioUring: boolean;
  visible: string[];
  rootWritable: boolean;
  usrWritable: boolean;
  workWritable: boolean;
  /** The first line of /proc/self/uid_map: inside, outside (in the parent user namespace), count. */
  uidMap: string[];
  /** Mounts at /workspace: 2 when the execution has its own tmpfs over the sandbox's. */
  workspaceMounts: number;
}

/** Problems with the facts for the requested features; empty when the sandbox is as strong as asked. */
export function checkFacts(f: ProbeFacts, features: IsolationFeatures): string[] {
  const bad: string[] = [];
  if (f.uid !== SANDBOX_UID) bad.push(`program uid is ${f.uid}, expected ${SANDBOX_UID}`);
  if (f.pid1 !== "rs-supervisor") bad.push(`pid 1 is ${JSON.stringify(f.pid1)}, not the supervisor (no pid namespace?)`);
  if (f.procPids.length > 3) bad.push(`program sees ${f.procPids.length} processes`);
  if (f.capEff !== 0 || f.capPrm !== 0 || f.capAmb !== 0 || f.capBnd !== 0) bad.push("program has capabilities");
  if (f.noNewPrivs !== "1") bad.push("no_new_privs is not set");
  if (f.netDevs.length !== 1 || f.netDevs[0] !== "lo") bad.push(`network devices visible: ${f.netDevs.join(",")}`);
  if (f.outbound === "connected") bad.push("outbound connection succeeded");
  if (features.seccomp && f.seccomp !== "2") bad.push(`seccomp mode is ${f.seccomp}, expected 2 (filter)`);
  if ((features.seccomp || features.disableUserns) && f.unshareUser) bad.push("program can create a user namespace");
  if (features.seccomp && f.ioUring) bad.push("program can set up an io_uring");
  if (f.visible.length) bad.push(`host paths visible: ${f.visible.join(", ")}`);
  if (f.rootWritable || f.usrWritable) bad.push("system folders are writable");
  if (!f.workWritable) bad.push("/workspace is not writable");
  if (features.freshNamespaces) {
    // The execution's user namespace is a child of the sandbox's, where the program's uid is SANDBOX_UID, or
    // with perExecutionUid one of the per-execution ones; inside its own it is SANDBOX_UID either way.
    const outer = Number(f.uidMap[1]);
    const ownNs = f.uidMap[0] === String(SANDBOX_UID) && f.uidMap[2] === "1";
    if (!ownNs || (features.perExecutionUid ? outer < EXEC_ID_BASE : outer !== SANDBOX_UID))
      bad.push(`execution has no user namespace ${features.perExecutionUid ? "and uid " : ""}of its own (uid_map ${f.uidMap.join(" ")})`);
    if (f.workspaceMounts !== 2) bad.push(`execution has no /workspace of its own (${f.workspaceMounts} mounts there)`);
  }
  return bad;
}

export interface ProbeOutcome {
  features: IsolationFeatures;
  facts: ProbeFacts;
  /** Candidates that failed before the one in force, with why. */
  rejected: Array<{ features: IsolationFeatures; why: string }>;
}

/** Host paths that must not exist inside a sandbox. */
function hiddenPaths(layout: SandboxLayout): string[] {
  const paths = ["/etc/shadow", "/etc/ssh", "/home", "/work", "/var", "/run", "/sys", layout.runtime.dir, process.cwd()];
  // /root may exist only as the parent of a bound interpreter prefix (pyenv); its other contents never.
  if (!layout.extraBinds.some((b) => b.startsWith("/root/"))) paths.push("/root");
  const own = ["/tmp", "/workspace", "/dev", "/proc", "/usr", "/.rs"];
  return paths.filter(
    (p) => p !== "/" && !own.some((o) => p === o || p.startsWith(o + "/")) && !layout.extraBinds.some((b) => b === p || b.startsWith(p + "/")),
  );
}

async function probeOnce(layout: SandboxLayout, uidPool: HostUidPool | null): Promise<ProbeFacts> {
  const sandbox = await SandboxProcess.start(layout, "", uidPool);
  try {
    const limits = resolveLimits(layout.settings, { wallMs: 10_000 });
    const r = await sandbox
      .run({
        language: "python",
        code: `HIDDEN = ${JSON.stringify(hiddenPaths(layout))}\n${PROBE_PY}`,
        limits,
        rlimits: toRlimits(limits, "python", layout.settings.isolation.addressSpaceHeadroomMb),
        files: {},
        stdin: "",
        once: true,
      })
      .catch((e: Error) => {
        throw new Error(`probe did not run: ${e.message}`);
      });
    if (r.exitCode !== 0) throw new Error(`probe failed (exit ${r.exitCode}, ${r.signal ?? "no signal"}): ${r.stderr.slice(-800)}`);
    return JSON.parse(r.stdout.trim().split("\n").pop() ?? "{}") as ProbeFacts;
  } finally {
    sandbox.kill();
    await sandbox.exited;
  }
}

/** Tries feature sets from strongest to weakest and returns the first that starts and passes every check. */
export async function probeIsolation(
  base: Omit<SandboxLayout, "features">,
  candidates: IsolationFeatures[],
  uidPool: HostUidPool | null,
  log: Logger,
): Promise<ProbeOutcome> {
  const rejected: ProbeOutcome["rejected"] = [];
  for (const features of candidates) {
    const layout: SandboxLayout = { ...base, features };
    try {
      const facts = await probeOnce(layout, uidPool);
      const bad = checkFacts(facts, features);
      if (bad.length === 0) return { features, facts, rejected };
      rejected.push({ features, why: bad.join("; ") });
    } catch (e) {
      rejected.push({ features, why: (e as Error).message });
    }
    log.warn({ features, why: rejected[rejected.length - 1]!.why }, "sandbox isolation candidate rejected, trying a weaker one");
  }
  const namespaceTrouble = rejected.some((r) => /bwrap:|namespace|Operation not permitted/i.test(r.why));
  throw new Error(
    "sandbox: no isolation candidate passed the self-test, refusing to run code unsandboxed." +
      (namespaceTrouble
        ? " bwrap could not create its namespaces: unprivileged user namespaces must be enabled (sysctl kernel.unprivileged_userns_clone=1 / user.max_user_namespaces > 0; in Docker, a seccomp profile that allows clone/unshare)."
        : "") +
      " Tried:\n" +
      rejected.map((r) => `  ${JSON.stringify(r.features)}: ${r.why}`).join("\n"),
  );
}

/** Candidate feature sets, strongest first. */
export function featureCandidates(opts: {
  seccompAvailable: boolean;
  seccompMode: "auto" | "required" | "off";
  canSetUid: boolean;
  /** Asked for, and possible: the C loop is built and seccomp is not off. */
  freshNamespaces?: boolean;
  /** Asked for (with freshNamespaces, as root). */
  perExecutionUid?: boolean;
}): IsolationFeatures[] {
  // As root, bwrap must not run as root: the program would be host uid 0 without capabilities, for
  // which the kernel does not enforce RLIMIT_NPROC (a fork bomb would be bounded only by the wall
  // clock). So as root only per-sandbox uids are acceptable; as a normal user, that user's uid is.
  const uidOptions = opts.canSetUid ? [true] : [false];
  const seccompOptions = opts.seccompMode === "off" || !opts.seccompAvailable ? [false] : opts.seccompMode === "required" ? [true] : [true, false];
  const out: IsolationFeatures[] = [];
  // Fresh namespaces per execution first: the supervisor must be able to unshare, so bwrap does not disable
  // user namespaces, and the program is kept from them by its own seccomp filter.
  // A host uid per execution, strongest of all, needs root (it maps a range of host uids for the sandbox).
  if (opts.freshNamespaces && seccompOptions.includes(true) && opts.perExecutionUid && opts.canSetUid)
    out.push({ seccomp: true, disableUserns: false, perSandboxHostUid: true, freshNamespaces: true, perExecutionUid: true });
  if (opts.freshNamespaces && seccompOptions.includes(true))
    for (const perSandboxHostUid of uidOptions)
      out.push({ seccomp: true, disableUserns: false, perSandboxHostUid, freshNamespaces: true, perExecutionUid: false });
  // Then drop --disable-userns (seccomp refuses namespace creation anyway), then seccomp.
  for (const perSandboxHostUid of uidOptions)
    for (const seccomp of seccompOptions)
      for (const disableUserns of [true, false]) out.push({ seccomp, disableUserns, perSandboxHostUid, freshNamespaces: false, perExecutionUid: false });
  return out;
}
