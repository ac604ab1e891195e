// A classic-BPF seccomp filter handed to bwrap (`--seccomp FD`). Namespaces, read-only mounts and
// rlimits already contain ordinary code; this filter removes the kernel interfaces that sandboxed
// programs never need and that make up most container-escape bugs (ptrace, keyrings, bpf,
// io_uring, userfaultfd, perf, mount APIs, module loading, nested namespaces), plus POSIX message queues
// (state a reused sandbox could not clean up between commands). It is a deny list in
// the spirit of Docker's default profile, small enough to audit, built here so that no libseccomp
// or compiler is needed on the host. Architectures without a table get no filter (reported by the probe).
import { arch, endianness } from "node:os";

const SECCOMP_RET_ALLOW = 0x7fff0000;
const SECCOMP_RET_ERRNO = 0x00050000;
const SECCOMP_RET_KILL_PROCESS = 0x80000000;
const EPERM = 1;
const ENOSYS = 38;

const BPF_LD_W_ABS = 0x20;
const BPF_JEQ_K = 0x15;
const BPF_JGE_K = 0x35;
const BPF_JSET_K = 0x45;
const BPF_RET_K = 0x06;

// struct seccomp_data: int nr @0, u32 arch @4, u64 ip @8, u64 args[6] @16 (low word first on LE).
const OFF_NR = 0;
const OFF_ARCH = 4;
const OFF_ARG0_LO = 16;

// CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWTIME
const CLONE_NAMESPACE_FLAGS = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000 | 0x00000080;

interface ArchTable {
  auditArch: number;
  /** x86_64 also accepts x32 syscalls (nr | 0x40000000); a sandbox has no use for them. */
  x32Bit?: number;
  clone: number;
  clone3: number;
  denied: Record<string, number>;
}

// Syscall numbers from the kernel's arch tables (arch/x86/entry/syscalls/syscall_64.tbl and the
// generic include/uapi/asm-generic/unistd.h used by arm64). Numbers >= 424 are shared by all arches.
const SHARED_NEW = {
  pidfd_getfd: 438,
  io_uring_setup: 425,
  io_uring_enter: 426,
  io_uring_register: 427,
  open_tree: 428,
  move_mount: 429,
  fsopen: 430,
  fsconfig: 431,
  fsmount: 432,
  fspick: 433,
  mount_setattr: 442,
};

const X86_64: ArchTable = {
  auditArch: 0xc000003e,
  x32Bit: 0x40000000,
  clone: 56,
  clone3: 435,
  denied: {
    ptrace: 101,
    syslog: 103,
    uselib: 134,
    personality: 135,
    vhangup: 153,
    pivot_root: 155,
    _sysctl: 156,
    adjtimex: 159,
    acct: 163,
    settimeofday: 164,
    mount: 165,
    umount2: 166,
    swapon: 167,
    swapoff: 168,
    reboot: 169,
    sethostname: 170,
    setdomainname: 171,
    iopl: 172,
    ioperm: 173,
    init_module: 175,
    delete_module: 176,
    quotactl: 179,
    lookup_dcookie: 212,
    clock_settime: 227,
    kexec_load: 246,
    add_key: 248,
    request_key: 249,
    keyctl: 250,
    unshare: 272,
    move_pages: 279,
    perf_event_open: 298,
    name_to_handle_at: 303,
    open_by_handle_at: 304,
    clock_adjtime: 305,
    setns: 308,
    process_vm_readv: 310,
    process_vm_writev: 311,
    kcmp: 312,
    finit_module: 313,
    kexec_file_load: 320,
    bpf: 321,
    userfaultfd: 323,
    // POSIX message queues outlive their creator and cannot be listed (no mqueue mount), so a reused
    // sandbox could not remove them between commands.
    mq_open: 240,
    mq_unlink: 241,
    mq_timedsend: 242,
    mq_timedreceive: 243,
    mq_notify: 244,
    mq_getsetattr: 245,
    ...SHARED_NEW,
  },
};

const AARCH64: ArchTable = {
  auditArch: 0xc00000b7,
  clone: 220,
  clone3: 435,
  denied: {
    umount2: 39,
    mount: 40,
    pivot_root: 41,
    quotactl: 60,
    acct: 89,
    personality: 92,
    unshare: 97,
    kexec_load: 104,
    init_module: 105,
    delete_module: 106,
    clock_settime: 112,
    syslog: 116,
    ptrace: 117,
    reboot: 142,
    sethostname: 161,
    setdomainname: 162,
    settimeofday: 170,
    adjtimex: 171,
    add_key: 217,
    request_key: 218,
    keyctl: 219,
    swapon: 224,
    swapoff: 225,
    move_pages: 239,
    perf_event_open: 241,
    name_to_handle_at: 264,
    open_by_handle_at: 265,
    clock_adjtime: 266,
    setns: 268,
    process_vm_readv: 270,
    process_vm_writev: 271,
    kcmp: 272,
    finit_module: 273,
    bpf: 280,
    userfaultfd: 282,
    kexec_file_load: 294,
    mq_open: 180,
    mq_unlink: 181,
    mq_timedsend: 182,
    mq_timedreceive: 183,
    mq_notify: 184,
    mq_getsetattr: 185,
    ...SHARED_NEW,
  },
};

function archTable(): ArchTable | null {
  if (endianness() !== "LE") return null;
  if (arch() === "x64") return X86_64;
  if (arch() === "arm64") return AARCH64;
  return null;
}

interface Insn {
  code: number;
  jt: number | string;
  jf: number | string;
  k: number;
  label?: string;
}

/** Names of the syscalls the filter refuses on this machine's architecture (for logs and docs). */
export function deniedSyscalls(): string[] {
  const t = archTable();
  return t ? [...Object.keys(t.denied), "clone3 (ENOSYS, glibc falls back to clone)", "clone with namespace flags"] : [];
}

/**
 * The filter as the raw `struct sock_filter[]` bytes bwrap reads from `--seccomp FD`, or null when
 * this architecture has no syscall table here. `freshNamespaces`: leave unshare(2), setns(2) and mount(2) to the
 * per-execution filter (buildExecutionFilter), so that the supervisor can give each execution its own
 * namespaces and tmpfs folders. `pinAtStart`: leave io_uring_setup(2) and io_uring_register(2) to the
 * sandbox's start, which pins pages with them and then seals them off (buildSealFilter) before any request;
 * io_uring_enter(2) stays refused throughout. Why that is safe: sandbox/README.md, "io_uring at a sandbox's start".
 */
export function buildSeccompFilter(opts: { freshNamespaces?: boolean; pinAtStart?: boolean } = {}): Buffer | null {
  const t = archTable();
  if (!t) return null;
  const prog: Insn[] = [];
  const ld = (off: number) => prog.push({ code: BPF_LD_W_ABS, jt: 0, jf: 0, k: off });
  const jump = (code: number, k: number, jt: number | string, jf: number | string) => prog.push({ code, jt, jf, k });

  ld(OFF_ARCH);
  jump(BPF_JEQ_K, t.auditArch, 0, "kill");
  ld(OFF_NR);
  if (t.x32Bit) jump(BPF_JGE_K, t.x32Bit, "enosys", 0);
  for (const [name, nr] of Object.entries(t.denied)) {
    if (opts.freshNamespaces && PER_EXECUTION.includes(name)) continue;
    if (opts.pinAtStart && SUPERVISOR_START.includes(name)) continue;
    jump(BPF_JEQ_K, nr, "eperm", 0);
  }
  // clone3 passes its flags in memory that a filter cannot read; ENOSYS makes libc fall back to clone.
  jump(BPF_JEQ_K, t.clone3, "enosys", 0);
  jump(BPF_JEQ_K, t.clone, 0, "allow");
  ld(OFF_ARG0_LO);
  jump(BPF_JSET_K, CLONE_NAMESPACE_FLAGS, "eperm", "allow");
  return assemble(prog);
}

/**
 * What the supervisor needs to set up an execution's namespaces (setns: entering its template user
 * namespace); refused to the execution itself.
 */
const PER_EXECUTION = ["unshare", "setns", "mount"];

/** What a reused sandbox pins its hot pages with at start (supervisor/pin-hot.h), sealed off before any request. */
const SUPERVISOR_START = ["io_uring_setup", "io_uring_register"];

/**
 * What each execution adds to the sandbox's filter when the supervisor gives it fresh namespaces
 * (filters stack; the strictest answer wins): unshare(2), setns(2) and mount(2) refused, which the sandbox-wide
 * filter then allows for the supervisor alone. Null when this architecture has no table.
 */
export function buildExecutionFilter(): Buffer | null {
  return denyOnly(PER_EXECUTION);
}

/**
 * The seal: what pid 1 (and a node sandbox's fork server) loads on itself once it has pinned its hot pages,
 * before the sandbox serves anything: io_uring_setup(2) and io_uring_register(2) refused, to it and to every
 * process it forks from then on, as the sandbox-wide filter refuses them where nothing is pinned. Null when this
 * architecture has no table.
 */
export function buildSealFilter(): Buffer | null {
  return denyOnly(SUPERVISOR_START);
}

/** A filter that refuses these syscalls (EPERM), kills on another architecture and allows the rest. */
function denyOnly(names: string[]): Buffer | null {
  const t = archTable();
  if (!t) return null;
  const prog: Insn[] = [];
  prog.push({ code: BPF_LD_W_ABS, jt: 0, jf: 0, k: OFF_ARCH });
  prog.push({ code: BPF_JEQ_K, jt: 0, jf: "kill", k: t.auditArch });
  prog.push({ code: BPF_LD_W_ABS, jt: 0, jf: 0, k: OFF_NR });
  for (const name of names) prog.push({ code: BPF_JEQ_K, jt: "eperm", jf: 0, k: t.denied[name]! });
  return assemble(prog); // falls through to "allow"
}

function assemble(prog: Insn[]): Buffer {
  prog.push({ code: BPF_RET_K, jt: 0, jf: 0, k: SECCOMP_RET_ALLOW, label: "allow" });
  prog.push({ code: BPF_RET_K, jt: 0, jf: 0, k: SECCOMP_RET_ERRNO | EPERM, label: "eperm" });
  prog.push({ code: BPF_RET_K, jt: 0, jf: 0, k: SECCOMP_RET_ERRNO | ENOSYS, label: "enosys" });
  prog.push({ code: BPF_RET_K, jt: 0, jf: 0, k: SECCOMP_RET_KILL_PROCESS, label: "kill" });

  const labels = new Map<string, number>();
  prog.forEach((insn, i) => insn.label && labels.set(insn.label, i));
  const resolve = (target: number | string, at: number): number => {
    if (typeof target === "number") return target;
    const dest = labels.get(target);
    if (dest === undefined) throw new Error(`seccomp: unknown label ${target}`);
    const off = dest - at - 1;
    if (off < 0 || off > 255) throw new Error(`seccomp: jump to ${target} out of range (${off})`);
    return off;
  };
  const buf = Buffer.alloc(prog.length * 8);
  prog.forEach((insn, i) => {
    buf.writeUInt16LE(insn.code, i * 8);
    buf.writeUInt8(resolve(insn.jt, i), i * 8 + 2);
    buf.writeUInt8(resolve(insn.jf, i), i * 8 + 3);
    buf.writeUInt32LE(insn.k >>> 0, i * 8 + 4);
  });
  return buf;
}
