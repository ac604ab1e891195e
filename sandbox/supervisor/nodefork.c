// nodefork.node: the node fork server's native half (boot.cjs --zygote loads it inside a sandbox).
//
// A node process started once per sandbox (the zygote) loads its modules, warms the code paths most
// programs run, then sits in serve(): per execution the supervisor (pid 1) sends it two fds (the program's
// stdin and the pipe its code arrives on) and it forks. The child returns to JavaScript and runs the
// program as boot.cjs always has; the zygote reports the child's pid, waits for it, reports its status and
// CPU time, and waits for the next. A fork of a warm node costs a fraction of a node's start.
//
// In a sandbox that serves many commands it first pins the pages a node execution writes (pin-hot.h; survey()
// below), so that each fork copies them at once instead of each child faulting on them, and then seals io_uring
// off itself (sandbox/README.md, "io_uring at a sandbox's start").
//
// Forking node needs what V8 and libuv do not do for us:
//   - V8 marks its heap MADV_DONTFORK, so a child would have no heap: every mapping is marked DOFORK again
//     when serve() starts (from then on the zygote runs no JavaScript, so V8 maps nothing new);
//   - the child has only the forking thread, so V8 must never hand work to its worker threads: the zygote
//     runs with --single-threaded, and the child leaves through _exit (exit_now), never through node's
//     teardown, which joins threads that are not there;
//   - libuv's epoll and async fds are the zygote's: uv_loop_fork gives the child its own, and the child
//     closes its other loops' fds and takes a signal lock of its own (sort_fds, unshare_fds).
//
// The zygote runs under the same uid as the program, so the kernel alone would let a program signal it,
// change its priority or limits, or open a pidfd on it. Each child loads a seccomp filter (EPERM) for those
// calls aimed at any of the zygote's threads, its process group, or everyone (kill(-1)); the zygote is not
// dumpable (its /proc files belong to root: no /proc/<pid>/mem, fd or oom_score_adj), has a session of its
// own, ignores SIGUSR1 (node would open its inspector), and keeps no fd a child could reach.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <node_api.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/ioctl.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <dirent.h>
#include <dlfcn.h>
#include <unistd.h>
#include <uv.h>

#include "exec-isolation.h"
#include "huge-text.h"
#include "pin-hot.h"

// 2 MiB per execution, while it runs: moving node's 26 MiB at once before a fork held that request up
// (huge-text.h).
static struct rs_huge_text_plan huge_plan = {.after = -1, .per_step = 1, .after_fork = 1};
// Hot pages (pin-hot.h): at serve()'s start the zygote surveys what a node execution writes and pins
// those pages (at most pin_max), then loads pid 1's seal on itself (no io_uring from then on, in it or in any
// child) before it reports ready. pid 1 starts the zygote before sealing itself, for this, and only then.
static long pin_max;
static struct sock_filter seal[256];
static unsigned seal_len;
static int survey_child;  // in the survey child: list the pages it wrote when it leaves (exit_now)
// The survey's program: what most node programs do (print, parse, a few arrays, strings and objects).
static const char SURVEY_PROGRAM[] =
    "console.log(1);\n"
    "const f = (xs) => xs.filter((x) => x % 3).map((x) => x * 2).sort((a, b) => a - b);\n"
    "const vals = '3 1 2 7'.split(' ').map(Number);\n"
    "const d = Object.fromEntries(vals.map((v) => [String(v), v]));\n"
    "console.log(f(vals), Object.keys(d).length, `${(2.5).toFixed(2)}-x`, JSON.stringify(d), Math.max(...vals));\n";

#if defined(__x86_64__)
#define RS_AUDIT_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define RS_AUDIT_ARCH AUDIT_ARCH_AARCH64
#else
#error "nodefork: no seccomp arch for this machine"
#endif

#define MAX_TIDS 64
#define MAX_INSNS 1024

static uv_loop_t *loop;
static int sock_fd = -1;
static pid_t zygote_pid;
static pid_t tids[MAX_TIDS];
static int n_tids;
static struct sock_filter filter[MAX_INSNS];
static unsigned filter_len;
// What a child must not share with the zygote: every fd of the zygote's other threads' event loops (node's
// platform runs libuv loops of its own), closed first thing in the child; and libuv's process-wide signal
// lock, a pipe holding one byte (read to lock, written to unlock), which the child replaces with a pipe of its
// own. The main loop's fds are the child's own after uv_loop_fork, and fds 0-3 are the request's.
#define MAX_FOREIGN_FDS 64
static int foreign_fds[MAX_FOREIGN_FDS];
static int n_foreign;
static int lock_r = -1, lock_w = -1;
// With fresh namespaces per execution: what each child sets up before its program (exec-isolation.h).
static struct rs_exec_isolation iso;
// A fork must not tell its program how long the zygote has served: each child moves node's clocks to its own
// start, as a node started for it would have them. The zygote finds where they are once:
// - process.uptime() counts from per_process::node_start_time (uv_hrtime ns; node exports it);
// - performance.now() counts from performance::performance_process_start (uv_hrtime ns; exported), and
//   performance_process_start_timestamp is the same instant in epoch microseconds (exported);
// - performance.timeOrigin reads a copy of both in the environment's milestones, a Float64Array of
//   N_MILESTONES entries (node 20: timeOrigin timestamp, timeOrigin, environment, nodeStart, v8Start,
//   loopStart, loopExit, bootstrapComplete; uv_hrtime ns, -1 when not reached) that no exported name reaches.
//   find_milestones() looks for it in the malloc heap (once): the one place holding those two values
//   side by side, followed by milestones that are -1 or between the origin and now. Where address-space
//   randomization put a mapping right after the heap, malloc cannot grow it and carries on in anonymous
//   mappings (now and then a [heap] does not hold the array): those are searched too,
//   only when the heap alone did not give exactly one place. The milestones node reached before the fork (its
//   bootstrap) move to the child's origin: its node was ready when it started.
// What is not found, or does not hold what it should, is left alone. performance.now() and timeOrigin move
// together or not at all: one without the other would break performance.timeOrigin + performance.now() ==
// Date.now().
#define N_MILESTONES 8
static uint64_t *node_start_ns;
static uint64_t *perf_start_ns;
static double *perf_start_us;
static double *milestones;
static int ms_timestamp;  // which entry of milestones holds the origin's timestamp (the others are uv_hrtime ns)

// Whether m holds the origin and its timestamp side by side, then milestones that are -1 or between the origin and
// now: the timestamp's index, or -1.
static int milestones_at(const double *m, double origin, double stamp, double now) {
  int o, t;
  if (m[0] == stamp && m[1] == origin) t = 0, o = 1;
  else if (m[0] == origin && m[1] == stamp) o = 0, t = 1;
  else return -1;
  for (int i = 0; i < N_MILESTONES; i++)
    if (i != o && i != t && m[i] != -1 && !(m[i] >= origin && m[i] <= now)) return -1;
  return t;
}

// Counts the places in [lo, hi) (pages not in memory skipped: they hold nothing node wrote, and reading them
// would map them) that hold the milestones; the last one found goes to *found.
static int find_milestones(unsigned long lo, unsigned long hi, double origin, double stamp, double **found) {
  long page = sysconf(_SC_PAGESIZE);
  size_t pages = (hi - lo) / (size_t)page;
  unsigned char *in_core = malloc(pages);
  if (in_core == NULL || mincore((void *)lo, hi - lo, in_core) != 0) {
    free(in_core);
    return 0;
  }
  double now = (double)uv_hrtime();
  size_t per_page = (size_t)page / sizeof(double);
  int hits = 0;
  for (size_t p = 0; p < pages; p++) {
    if (!(in_core[p] & 1)) continue;
    // An array may run on into the next page: read it only when that page is in memory too.
    size_t last = p + 1 < pages && (in_core[p + 1] & 1) ? per_page : per_page - N_MILESTONES + 1;
    double *d = (double *)(lo + p * (size_t)page);
    for (size_t k = 0; k < last; k++) {
      int t = (d[k] == stamp || d[k] == origin) ? milestones_at(d + k, origin, stamp, now) : -1;
      if (t >= 0) {
        *found = d + k;
        ms_timestamp = t;
        hits++;
      }
    }
  }
  free(in_core);
  return hits;
}

#define N_CLOCK_VARS 3
static const char *const CLOCK_VARS[N_CLOCK_VARS] = {
    "_ZN4node11per_process15node_start_timeE",
    "_ZN4node11performance25performance_process_startE",
    "_ZN4node11performance35performance_process_start_timestampE",
};

#define MAX_ANON_REGIONS 256

// In the zygote, once: the variables found by name (each kept only where it lies in a writable mapping: a name
// dlsym finds could be a constant in another node build), the malloc heap's bounds and those of the unnamed
// read-write mappings malloc may have carried on in, in one read of the maps.
static void find_clocks(void) {
  void *vars[N_CLOCK_VARS];
  int ok[N_CLOCK_VARS] = {0};
  for (int i = 0; i < N_CLOCK_VARS; i++) vars[i] = dlsym(RTLD_DEFAULT, CLOCK_VARS[i]);
  unsigned long heap_lo = 0, heap_hi = 0;
  static unsigned long anon[MAX_ANON_REGIONS][2];
  int n_anon = 0;
  FILE *maps = fopen("/proc/self/maps", "re");
  char line[512];
  while (maps != NULL && fgets(line, sizeof line, maps) != NULL) {
    unsigned long lo, hi, inode;
    char perms[8], name[64] = "";
    if (sscanf(line, "%lx-%lx %7s %*s %*s %lu %63s", &lo, &hi, perms, &inode, name) < 4 || perms[1] != 'w') continue;
    for (int i = 0; i < N_CLOCK_VARS; i++)
      if (vars[i] != NULL && (unsigned long)vars[i] >= lo && (unsigned long)vars[i] + sizeof(uint64_t) <= hi) ok[i] = 1;
    if (perms[0] != 'r' || perms[3] != 'p' || hi <= lo) continue;
    if (strcmp(name, "[heap]") == 0) heap_lo = lo, heap_hi = hi;
    else if (name[0] == 0 && inode == 0 && n_anon < MAX_ANON_REGIONS) anon[n_anon][0] = lo, anon[n_anon][1] = hi, n_anon++;
  }
  if (maps != NULL) fclose(maps);
  uint64_t now = uv_hrtime();
  uint64_t *p = ok[0] ? vars[0] : NULL;
  node_start_ns = p != NULL && *p > 0 && *p <= now ? p : NULL;
  perf_start_ns = ok[1] ? vars[1] : NULL;
  perf_start_us = ok[2] ? vars[2] : NULL;
  milestones = NULL;
  if (perf_start_ns != NULL && perf_start_us != NULL && *perf_start_ns > 0 && *perf_start_ns <= now && *perf_start_us > 0) {
    double origin = (double)*perf_start_ns, stamp = *perf_start_us;
    double *found = NULL;
    int hits = heap_hi > 0 ? find_milestones(heap_lo, heap_hi, origin, stamp, &found) : 0;
    if (hits != 1) {
      // Not (only) in the heap: the whole of what malloc may hold must then show exactly one place.
      for (int i = 0; i < n_anon; i++) hits += find_milestones(anon[i][0], anon[i][1], origin, stamp, &found);
    }
    if (hits == 1) milestones = found;
  }
  if (milestones == NULL) perf_start_ns = NULL, perf_start_us = NULL;
}

// In a child: node's clocks start now (see find_clocks).
static void reset_clocks(void) {
  uint64_t now = uv_hrtime();
  if (node_start_ns != NULL) *node_start_ns = now;
  if (milestones == NULL) return;
  uv_timeval64_t tv;
  if (uv_gettimeofday(&tv) != 0) return;
  double stamp = (double)tv.tv_sec * 1e6 + (double)tv.tv_usec;
  *perf_start_ns = now;
  *perf_start_us = stamp;
  for (int i = 0; i < N_MILESTONES; i++)
    if (i != ms_timestamp && milestones[i] != -1) milestones[i] = (double)now;
  milestones[ms_timestamp] = stamp;
}

static napi_value throw_errno(napi_env env, const char *what) {
  char msg[160];
  snprintf(msg, sizeof msg, "nodefork: %s: %s", what, strerror(errno));
  napi_throw_error(env, NULL, msg);
  return NULL;
}

// ---- the children's filter -------------------------------------------------------------------------

static void emit(unsigned short code, unsigned char jt, unsigned char jf, uint32_t k) {
  if (filter_len < MAX_INSNS) filter[filter_len++] = (struct sock_filter)BPF_JUMP(code, k, jt, jf);
  else filter_len = MAX_INSNS + 1;
}

#define LOAD(off) emit(BPF_LD | BPF_W | BPF_ABS, 0, 0, (off))
#define ARG_LO(i) (offsetof(struct seccomp_data, args) + 8 * (i))
#define DENY() emit(BPF_RET | BPF_K, 0, 0, SECCOMP_RET_ERRNO | EPERM)
// Every rule ends in its own EPERM return, so no jump is longer than one rule (classic BPF jumps are
// 8-bit).

// "syscall nr with arg i (its low word: pids are ints) equal to one of vals" -> EPERM.
static void rule_values(int nr, int arg, const uint32_t *vals, int n) {
  LOAD(offsetof(struct seccomp_data, nr));
  emit(BPF_JMP | BPF_JEQ | BPF_K, 0, (unsigned char)(2 * n + 2), (uint32_t)nr);
  int ret = filter_len + 2 * n + 1;
  for (int i = 0; i < n; i++) {
    LOAD(ARG_LO(arg));
    emit(BPF_JMP | BPF_JEQ | BPF_K, (unsigned char)(ret - (int)filter_len - 1), 0, vals[i]);
  }
  emit(BPF_JMP | BPF_JA | BPF_K, 0, 0, 1);
  DENY();
}

static void rule_always(int nr) {
  LOAD(offsetof(struct seccomp_data, nr));
  emit(BPF_JMP | BPF_JEQ | BPF_K, 0, 1, (uint32_t)nr);
  DENY();
}

// "syscall nr with arg i other than allowed" -> EPERM (setpriority/ioprio_set aimed at a group or a uid).
static void rule_not(int nr, int arg, uint32_t allowed) {
  LOAD(offsetof(struct seccomp_data, nr));
  emit(BPF_JMP | BPF_JEQ | BPF_K, 0, 3, (uint32_t)nr);
  LOAD(ARG_LO(arg));
  emit(BPF_JMP | BPF_JEQ | BPF_K, 1, 0, allowed);
  DENY();
}

// A rule skips 2 instructions a value plus 2: the longest (kill's) must fit an 8-bit jump.
_Static_assert(2 * (MAX_TIDS + 2) + 2 <= 255, "rule_values jumps are 8-bit");

static int build_filter(void) {
  // The server's threads, then (for kill only) its process group (it leads its own session) and -1.
  uint32_t ids[MAX_TIDS + 2];
  for (int i = 0; i < n_tids; i++) ids[i] = (uint32_t)tids[i];
  ids[n_tids] = (uint32_t)(-zygote_pid);
  ids[n_tids + 1] = (uint32_t)-1;
  filter_len = 0;
  // Another ABI (i386 through int 0x80, x32) numbers its calls otherwise: refuse it outright.
  LOAD(offsetof(struct seccomp_data, arch));
  emit(BPF_JMP | BPF_JEQ | BPF_K, 1, 0, RS_AUDIT_ARCH);
  DENY();
#ifdef __x86_64__
  LOAD(offsetof(struct seccomp_data, nr));
  emit(BPF_JMP | BPF_JGE | BPF_K, 0, 1, 0x40000000u);
  DENY();
#endif
  rule_values(SYS_kill, 0, ids, n_tids + 2);
  rule_values(SYS_tkill, 0, ids, n_tids);
  rule_values(SYS_tgkill, 0, ids, n_tids);
  rule_values(SYS_rt_sigqueueinfo, 0, ids, n_tids);
  rule_values(SYS_rt_tgsigqueueinfo, 0, ids, n_tids);
  rule_values(SYS_pidfd_open, 0, ids, n_tids);
  rule_always(SYS_pidfd_send_signal);  // a pidfd can also be an open /proc/<pid> folder
  rule_values(SYS_prlimit64, 0, ids, n_tids);
  rule_values(SYS_sched_setaffinity, 0, ids, n_tids);
  rule_values(SYS_sched_setscheduler, 0, ids, n_tids);
  rule_values(SYS_sched_setparam, 0, ids, n_tids);
  rule_values(SYS_sched_setattr, 0, ids, n_tids);
  rule_not(SYS_setpriority, 0, 0 /* PRIO_PROCESS */);
  rule_values(SYS_setpriority, 1, ids, n_tids);
  rule_not(SYS_ioprio_set, 0, 1 /* IOPRIO_WHO_PROCESS */);
  rule_values(SYS_ioprio_set, 1, ids, n_tids);
  emit(BPF_RET | BPF_K, 0, 0, SECCOMP_RET_ALLOW);
  return filter_len >= MAX_INSNS ? -1 : 0;
}

// ---- zygote set-up -----------------------------------------------------------------------------------

static int read_tids(void) {
  DIR *d = opendir("/proc/self/task");
  if (d == NULL) return -1;
  n_tids = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    if (n_tids == MAX_TIDS) {
      closedir(d);
      errno = E2BIG;
      return -1;
    }
    tids[n_tids++] = (pid_t)atoi(e->d_name);
  }
  closedir(d);
  return 0;
}

static int fd_link(int fd, char *out, size_t n) {
  char path[64];
  snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  ssize_t r = readlink(path, out, n - 1);
  if (r < 0) return -1;
  out[r] = 0;
  return 0;
}

// Sorts the zygote's fds into the main loop's (kept), the signal lock pipe and the rest (foreign).
// Returns 0, or -1 when they are not what is expected (then init fails rather than fork half-isolated).
static int sort_fds(void) {
  const int keep[] = {loop->backend_fd, loop->async_io_watcher.fd, loop->async_wfd, loop->signal_pipefd[0], loop->signal_pipefd[1], sock_fd};
  struct {
    int fd;
    unsigned long ino;
  } pipes[MAX_FOREIGN_FDS];
  int n_pipes = 0;
  n_foreign = 0;
  DIR *d = opendir("/proc/self/fd");
  if (d == NULL) return -1;
  int self = dirfd(d);
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    int fd = atoi(e->d_name), kept = fd <= 2 || fd == self;
    for (size_t i = 0; i < sizeof keep / sizeof keep[0]; i++) kept |= fd == keep[i];
    char link[128];
    if (kept || fd_link(fd, link, sizeof link) != 0) continue;
    unsigned long ino;
    if (sscanf(link, "pipe:[%lu]", &ino) == 1) {
      if (n_pipes == MAX_FOREIGN_FDS) break;
      pipes[n_pipes].fd = fd;
      pipes[n_pipes++].ino = ino;
    } else if (strncmp(link, "anon_inode:", 11) == 0 || strncmp(link, "socket:", 7) == 0) {
      if (n_foreign == MAX_FOREIGN_FDS) break;
      foreign_fds[n_foreign++] = fd;
    }  // files (node keeps /dev/null open as a spare fd) share nothing a child could use against us
  }
  closedir(d);
  if (n_pipes == MAX_FOREIGN_FDS || n_foreign == MAX_FOREIGN_FDS) return -1;
  // The lock: the one pipe with a byte waiting in it.
  for (int i = 0; i < n_pipes; i++) {
    int avail = 0;
    if ((fcntl(pipes[i].fd, F_GETFL) & O_ACCMODE) != O_RDONLY || ioctl(pipes[i].fd, FIONREAD, &avail) != 0 || avail != 1) continue;
    if (lock_r >= 0) return -1;  // two candidates: not the libuv we know
    lock_r = pipes[i].fd;
    for (int j = 0; j < n_pipes; j++)
      if (j != i && pipes[j].ino == pipes[i].ino) lock_w = pipes[j].fd;
  }
  if (lock_r < 0 || lock_w < 0) return -1;
  for (int i = 0; i < n_pipes; i++)
    if (pipes[i].fd != lock_r && pipes[i].fd != lock_w) {
      if (n_foreign == MAX_FOREIGN_FDS) return -1;
      foreign_fds[n_foreign++] = pipes[i].fd;
    }
  return 0;
}

// In the child: the foreign fds closed, a signal lock of its own (unlocked) at the same numbers.
static int unshare_fds(void) {
  for (int i = 0; i < n_foreign; i++) close(foreign_fds[i]);
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) return -1;
  int ok = write(p[1], "*", 1) == 1 && dup3(p[0], lock_r, O_CLOEXEC) == lock_r && dup3(p[1], lock_w, O_CLOEXEC) == lock_w;
  close(p[0]);
  close(p[1]);
  return ok ? 0 : -1;
}

static int hex_value(char c) {
  return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

// Decodes `len` hex digits into `out` (room for `cap` bytes). Returns the bytes written, or -1.
static long hex_decode(const char *hex, size_t len, unsigned char *out, size_t cap) {
  if (len % 2 || len / 2 > cap) return -1;
  for (size_t i = 0; i < len / 2; i++) {
    int hi = hex_value(hex[2 * i]), lo = hex_value(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return -1;
    out[i] = (unsigned char)(hi << 4 | lo);
  }
  return (long)(len / 2);
}

// init(sockFd, freshMounts, execFilterHex, execUids, pinMaxPages, sealHex): called once, after the zygote's
// warm-up and before serve(). freshMounts "" leaves fresh namespaces off; else both are what pid 1's C loop was
// configured with. execUids: pid 1 hands each child a uid of its own, so every child unshares its own user
// namespace and the server makes no template. pinMaxPages and sealHex (optional; a reused sandbox's): the
// most pages serve() pins after its survey, and the seal it then loads on itself.
static napi_value init(napi_env env, napi_callback_info info) {
  size_t argc = 6;
  napi_value argv[6];
  bool exec_uids = false;
  int32_t fd = -1;
  char mounts[512], hex[2 * RS_MAX_FILTER_INSNS * sizeof(struct sock_filter) + 2];
  size_t mounts_len = 0, hex_len = 0;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 3 || napi_get_value_int32(env, argv[0], &fd) != napi_ok ||
      napi_get_value_string_utf8(env, argv[1], mounts, sizeof mounts, &mounts_len) != napi_ok ||
      napi_get_value_string_utf8(env, argv[2], hex, sizeof hex, &hex_len) != napi_ok ||
      (argc >= 4 && napi_get_value_bool(env, argv[3], &exec_uids) != napi_ok)) {
    napi_throw_type_error(env, NULL, "nodefork.init(sockFd, freshMounts, execFilterHex, execUids, pinMaxPages, sealHex)");
    return NULL;
  }
  if (argc >= 6) {
    int32_t max = 0;
    char seal_hex[2 * sizeof seal + 2];
    size_t seal_hex_len = 0;
    long n = -1;
    if (napi_get_value_int32(env, argv[4], &max) != napi_ok ||
        napi_get_value_string_utf8(env, argv[5], seal_hex, sizeof seal_hex, &seal_hex_len) != napi_ok || seal_hex_len >= sizeof seal_hex - 1 ||
        (n = hex_decode(seal_hex, seal_hex_len, (unsigned char *)seal, sizeof seal)) < 0 || n % (long)sizeof(struct sock_filter)) {
      napi_throw_type_error(env, NULL, "nodefork.init: bad pinMaxPages or sealHex");
      return NULL;
    }
    seal_len = (unsigned)(n / (long)sizeof(struct sock_filter));
    pin_max = max > 0 ? max : 0;
  }
  if (mounts_len > 0) {
    unsigned char bytes[RS_MAX_FILTER_INSNS * sizeof(struct sock_filter)];
    long n = mounts_len < sizeof mounts - 1 && hex_len < sizeof hex - 1 ? hex_decode(hex, hex_len, bytes, sizeof bytes) : -1;
    if (n < 0 || rs_exec_isolation_parse(&iso, mounts, (const char *)bytes, n) != 0) {
      napi_throw_error(env, NULL, "nodefork: bad fresh-namespace settings");
      return NULL;
    }
    // Its own template user namespace (pid 1's is closed across the exec that started this server); without
    // one each child unshares its own.
    if (!exec_uids) rs_exec_isolation_template(&iso);
  }
  find_clocks();
  if (napi_get_uv_event_loop(env, &loop) != napi_ok) {
    napi_throw_error(env, NULL, "nodefork: no uv loop");
    return NULL;
  }
  // Out of the way of fds 0-3, which each child takes over for its program.
  sock_fd = fcntl(fd, F_DUPFD_CLOEXEC, 64);
  if (sock_fd < 0) return throw_errno(env, "socket fd");
  close(fd);
  if (setsid() < 0 && getsid(0) != getpid()) return throw_errno(env, "setsid");
  if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) return throw_errno(env, "dumpable");
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = SIG_IGN;
  if (sigaction(SIGUSR1, &sa, NULL) != 0) return throw_errno(env, "SIGUSR1");
  zygote_pid = getpid();
  if (sort_fds() != 0) {
    napi_throw_error(env, NULL, "nodefork: node's fds are not the ones expected (the libuv signal lock, the main loop's)");
    return NULL;
  }
  if (read_tids() != 0) return throw_errno(env, "threads");
  if (build_filter() != 0) {
    napi_throw_error(env, NULL, "nodefork: filter too large");
    return NULL;
  }
  return NULL;
}

// V8 allocates its heap with MADV_DONTFORK; a child must get those pages (copy-on-write). Once, when
// serve() starts: the zygote then runs no JavaScript, so nothing new is mapped.
static void mark_all_dofork(void) {
  int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  static char buf[1 << 16];
  size_t have = 0;
  for (;;) {
    ssize_t r = read(fd, buf + have, sizeof buf - 1 - have);
    if (r <= 0) break;
    have += (size_t)r;
    buf[have] = 0;
    char *line = buf, *nl;
    while ((nl = strchr(line, '\n')) != NULL) {
      *nl = 0;
      unsigned long lo, hi;
      char perms[8];
      if (sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) == 3 && perms[3] == 'p' && strstr(line, "[vvar") == NULL && strstr(line, "[vdso]") == NULL &&
          strstr(line, "[vsyscall]") == NULL)
        madvise((void *)lo, hi - lo, MADV_DOFORK);
      line = nl + 1;
    }
    have = strlen(line);
    memmove(buf, line, have);
  }
  close(fd);
}

static int send_all(const void *p, size_t n) {
  const char *c = p;
  while (n > 0) {
    ssize_t w = send(sock_fd, c, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return -1;
    c += w;
    n -= (size_t)w;
  }
  return 0;
}

// In the child, before any program code: its fds, its own session, default signals, libuv's own kernel
// state, the filter. Any failure ends the child (127) with one line on stderr.
static void child_setup(int in_fd, int code_fd, int fresh, unsigned exec_uid) {
  const char *step = "fds shared with the zygote";
  if (unshare_fds() != 0) goto fail;
  step = "dup2";
  if (dup2(in_fd, 0) < 0 || dup2(code_fd, 3) < 0) goto fail;
  if (in_fd != 0 && in_fd != 3) close(in_fd);
  if (code_fd != 0 && code_fd != 3) close(code_fd);
  close(sock_fd);
  step = "setsid";
  if (setsid() < 0) goto fail;
  signal(SIGUSR1, SIG_DFL);
  if (rs_isolate_exec(&iso, fresh, exec_uid) != 0) _exit(127);  // it said why, on stderr
  step = "dumpable";
  if (prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) != 0) goto fail;
  reset_clocks();  // process.uptime(), performance.now() and timeOrigin from now
  step = "uv_loop_fork";
  int r = uv_loop_fork(loop);
  if (r != 0) {
    errno = -r;
    goto fail;
  }
  step = "seccomp";
  struct sock_fprog prog = {(unsigned short)filter_len, filter};
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) != 0) goto fail;
  return;
fail:
  dprintf(2, "rollstream sandbox: could not start the node program (%s): %s\n", step, strerror(errno));
  _exit(127);
}

// serve(): the zygote's loop. Returns only in a child (its pid), ready to read its program from fd 3.
// Protocol on the socket: pid 1 sends "x", fresh (one byte, 0/1) and the execution's uid (uint32, 0: none)
// with SCM_RIGHTS [stdin, code]; the zygote answers
// "p" + pid (int32), then, when that child is gone, "s" + wait status (int32) + user and system CPU (int64 µs).
// The survey (pin-hot.h): a child forked and set up as an execution is, its output on /dev/null, runs
// SURVEY_PROGRAM and lists the pages it wrote as it leaves (exit_now); this process then pins those it has.
// Returns the child's pid in the survey child, -1 here. Nothing is pinned where a step fails.
static int survey(void) {
  int code[2], null = open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null < 0) return -1;
  if (pipe2(code, O_CLOEXEC) != 0) {
    close(null);
    return -1;
  }
  // The program fits in the pipe's buffer: written whole before the child reads it.
  int ok = write(code[1], SURVEY_PROGRAM, sizeof SURVEY_PROGRAM - 1) == (ssize_t)(sizeof SURVEY_PROGRAM - 1);
  close(code[1]);
  pid_t pid = ok && rs_pin_survey_begin() == 0 ? fork() : -1;
  if (pid == 0) {
    survey_child = 1;
    child_setup(null, code[0], 0, 0);
    if (dup2(0, 1) < 0 || dup2(0, 2) < 0) _exit(127);  // fd 0 is /dev/null, opened read-write
    alarm(10);
    return getpid();
  }
  close(null);
  close(code[0]);
  if (pid > 0) {
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
    }
    rs_pin_survey_end((uint64_t)pin_max);
  } else if (ok) {
    rs_pin_survey_end(0);  // only frees the list
  }
  return -1;
}

static napi_value serve(napi_env env, napi_callback_info info) {
  (void)info;
  mark_all_dofork();
  if (pin_max > 0) {
    int child = survey();
    if (child > 0) {
      napi_value self;
      napi_create_int32(env, child, &self);
      return self;
    }
  }
  // Fails closed: a zygote that cannot seal itself off io_uring never serves.
  if (seal_len > 0 && rs_pin_seal(seal, seal_len) != 0) _exit(126);
  // Ready: pid 1 waits for this byte before it sends a request.
  if (send_all("r", 1) != 0) _exit(0);
  for (;;) {
    unsigned char req[6];
    struct iovec iov = {req, sizeof req};
    union {
      char buf[CMSG_SPACE(2 * sizeof(int))];
      struct cmsghdr align;
    } u;
    struct msghdr mh;
    memset(&mh, 0, sizeof mh);
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    mh.msg_control = u.buf;
    mh.msg_controllen = sizeof u.buf;
    ssize_t r = recvmsg(sock_fd, &mh, MSG_CMSG_CLOEXEC);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) _exit(0);  // pid 1 is gone or closed us: nothing to serve
    int fds[2] = {-1, -1}, nfds = 0;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c != NULL; c = CMSG_NXTHDR(&mh, c)) {
      if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
        int n = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
        for (int i = 0; i < n; i++) {
          int fd;
          memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
          if (nfds < 2)
            fds[nfds++] = fd;
          else
            close(fd);
        }
      }
    }
    // The rest of the request, should the stream have split it (the fds came with its first byte).
    for (size_t got = (size_t)r; got < sizeof req;) {
      ssize_t more = recv(sock_fd, req + got, sizeof req - got, 0);
      if (more < 0 && errno == EINTR) continue;
      if (more <= 0) _exit(0);
      got += (size_t)more;
    }
    uint32_t exec_uid;
    memcpy(&exec_uid, req + 2, 4);
    if (req[0] != 'x' || req[1] > 1 || nfds != 2 || (mh.msg_flags & MSG_CTRUNC)) {
      for (int i = 0; i < nfds; i++) close(fds[i]);
      _exit(2);  // not our supervisor speaking: stop rather than guess
    }
    pid_t pid = fork();
    if (pid == 0) {
      child_setup(fds[0], fds[1], req[1], exec_uid);
      napi_value self;
      napi_create_int32(env, getpid(), &self);
      return self;
    }
    int err = pid < 0 ? errno : 0;
    close(fds[0]);
    close(fds[1]);
    unsigned char msg[1 + 4 + 16];
    msg[0] = 'p';
    int32_t p32 = pid < 0 ? -err : pid;
    memcpy(msg + 1, &p32, 4);
    if (send_all(msg, 5) != 0) _exit(0);
    if (pid < 0) continue;
    // The child has its own copy of this address space now: the next 2 MiB of node's code can move here
    // while it runs (huge-text.h).
    rs_huge_text_step(&huge_plan);
    int status = 0;
    struct rusage ru;
    while (wait4(pid, &status, 0, &ru) < 0) {
      if (errno != EINTR) {
        memset(&ru, 0, sizeof ru);
        status = 0x7f00;  // cannot happen: it is our child
        break;
      }
    }
    msg[0] = 's';
    int32_t s32 = status;
    int64_t ut = (int64_t)ru.ru_utime.tv_sec * 1000000 + ru.ru_utime.tv_usec;
    int64_t st = (int64_t)ru.ru_stime.tv_sec * 1000000 + ru.ru_stime.tv_usec;
    memcpy(msg + 1, &s32, 4);
    memcpy(msg + 5, &ut, 8);
    memcpy(msg + 13, &st, 8);
    if (send_all(msg, sizeof msg) != 0) _exit(0);
  }
}

// exit_now(code): the child's way out (node's own exit would join the zygote's threads, absent here).
static napi_value exit_now(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  int32_t code = 0;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) == napi_ok && argc >= 1) napi_get_value_int32(env, argv[0], &code);
  if (survey_child) rs_pin_survey_report();
  _exit(code & 0xff);
}

// randomSeed(): a positive int32 from the kernel's randomness (crypto's would load webcrypto in every fork).
static napi_value random_seed(napi_env env, napi_callback_info info) {
  (void)info;
  uint32_t v = 0;
  if (getrandom(&v, sizeof v, 0) != (ssize_t)sizeof v) return throw_errno(env, "getrandom");
  v >>= 1;
  napi_value out;
  napi_create_int32(env, v ? (int32_t)v : 1, &out);
  return out;
}

// socketFd(): where init() moved the socket to pid 1.
static napi_value socket_fd(napi_env env, napi_callback_info info) {
  (void)info;
  napi_value v;
  napi_create_int32(env, sock_fd, &v);
  return v;
}

// hugeTextAfter(n): node's code onto huge pages (huge-text.h), 2 MiB after each fork from the nth on.
static napi_value huge_text_after(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  int64_t after = -1;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 1 || napi_get_value_int64(env, argv[0], &after) != napi_ok) {
    napi_throw_type_error(env, NULL, "nodefork.hugeTextAfter(forks)");
    return NULL;
  }
  huge_plan.after = (long)after;
  return NULL;
}

NAPI_MODULE_INIT() {
  napi_property_descriptor props[] = {
      {"init", NULL, init, NULL, NULL, NULL, napi_default, NULL},
      {"serve", NULL, serve, NULL, NULL, NULL, napi_default, NULL},
      {"exitNow", NULL, exit_now, NULL, NULL, NULL, napi_default, NULL},
      {"socketFd", NULL, socket_fd, NULL, NULL, NULL, napi_default, NULL},
      {"randomSeed", NULL, random_seed, NULL, NULL, NULL, napi_default, NULL},
      {"hugeTextAfter", NULL, huge_text_after, NULL, NULL, NULL, napi_default, NULL},
  };
  napi_define_properties(env, exports, sizeof props / sizeof props[0], props);
  return exports;
}
