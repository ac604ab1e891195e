// The fork server's per-execution loop in C, loaded by supervisor.py (pid 1 of a sandbox) through
// _ctypes (npm ci builds it; the service refuses to start without it).
//
// Why C: every fork write-protects pid 1's pages, so each distinct page its loop writes afterwards costs
// a copy-on-write fault, once per execution. A loop in Python touches hundreds of pages (reference counts,
// pymalloc arenas, frames); this loop writes a few stack and buffer pages instead (sandbox/README.md).
//
// It serves only the hot path, a one-shot ("once") python command on the warm interpreter this loop
// forked, with no files; anything else (sessions, node, bash, files, a failed launch) is handed back to
// supervisor.py's loop (the Python loop) as the raw frame. The reset after a command mirrors
// supervisor.py's reset_after_command (every process killed and reaped, /workspace, /tmp and /dev/shm
// emptied with their mode, times and xattrs restored, SysV IPC removed, the shared output pipes' flags
// restored, pid 1's own state compared with its state at start); sandbox/test/reuse.test.ts covers this
// one with python executions and the Python one with node and bash executions.
//
// Built without Python headers: the few C-API functions used are declared here and resolved against
// the interpreter at load time. Functions are called with the GIL held (FUNCFLAG_PYTHONAPI), as
// os.fork() is, so that PyOS_BeforeFork/AfterFork_* keep the interpreter consistent in both processes.
#define _GNU_SOURCE
#include <dirent.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ipc.h>
#include <sys/mount.h>
#include <sys/msg.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/sem.h>
#include <sys/shm.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include "exec-isolation.h"
#include "huge-text.h"
#include "pin-hot.h"

typedef struct _object PyObject;
extern void PyOS_BeforeFork(void);
extern void PyOS_AfterFork_Parent(void);
extern void PyOS_AfterFork_Child(void);
extern PyObject *PyBytes_FromStringAndSize(const char *, ssize_t);
extern PyObject *PyLong_FromLong(long);
extern void Py_IncRef(PyObject *);
extern PyObject _Py_NoneStruct;

#define CTL_IN 3
#define CTL_OUT 4
#define MAX_FIELDS 64
#define MAX_WIPE_DEPTH 200
#define NSIG_NAMES 65

static const struct {
  const char *name;
  int res;
} RLIMIT_NAMES[] = {
    {"cpu", RLIMIT_CPU},         {"fsize", RLIMIT_FSIZE},   {"data", RLIMIT_DATA},         {"stack", RLIMIT_STACK},
    {"core", RLIMIT_CORE},       {"rss", RLIMIT_RSS},       {"nproc", RLIMIT_NPROC},       {"nofile", RLIMIT_NOFILE},
    {"memlock", RLIMIT_MEMLOCK}, {"as", RLIMIT_AS},         {"msgqueue", RLIMIT_MSGQUEUE}, {"nice", RLIMIT_NICE},
    {"rtprio", RLIMIT_RTPRIO},   {"rttime", RLIMIT_RTTIME}, {"sigpending", RLIMIT_SIGPENDING},
};
#define N_RLIMIT_NAMES (sizeof RLIMIT_NAMES / sizeof RLIMIT_NAMES[0])

static const int SOCKOPTS[] = {SO_SNDBUF, SO_RCVBUF, SO_SNDTIMEO, SO_RCVTIMEO, SO_LINGER, SO_PASSCRED, SO_RCVLOWAT, SO_PEEK_OFF};
#define N_SOCKOPTS (sizeof SOCKOPTS / sizeof SOCKOPTS[0])

// What a program of the same uid can change about pid 1 from outside, or about the output pipes it
// shares with pid 1 (see supervisor.py: own_state, pipe_state).
struct pipe_state {
  int flags;
  int pipe_size;  // -1: a socket (node gives its children socketpairs)
  unsigned char opt[N_SOCKOPTS][32];
  socklen_t optlen[N_SOCKOPTS];
};
struct own_state {
  struct rlimit lim[RLIM_NLIMITS];
  int nice, sched, ioprio;
  cpu_set_t affinity;
};

static struct own_state base_state;
static struct pipe_state base_pipes[3];
static char sig_names[NSIG_NAMES][16];
static int wake_fd = -1;
static int initialized;

// The warm interpreter: forked by this loop, blocked reading its program from code_w's pipe.
static pid_t warm_pid = -1;
static int warm_code_w = -1, warm_in_w = -1;

static char *frame_buf;
static size_t frame_cap;
static uint32_t frame_len;

// Fresh namespaces per execution (rs_fs_configure; isolation.ts: freshNamespaces). Each execution's
// process enters this process's template user namespace (or, with per-execution uids, unshares one of its
// own), unshares mount and ipc namespaces, mounts its own tmpfs over these folders, drops every capability
// and loads the per-execution seccomp filter (unshare, setns and mount refused): exec-isolation.h.
static struct rs_exec_isolation iso;
// Per-execution uids (rs_fs_exec_ids; isolation.ts: perExecutionUid): the service mapped [base, base + count)
// of this user namespace to host uids of their own, and each execution's process switches to the next one
// before it unshares. "Next" is counted by a fork handler, so every fork of this process, by this loop or by
// the Python one, takes a different one (in turn, after count of them).
static unsigned exec_id_base, exec_id_count;
static unsigned long exec_id_seq;
// Whether the warm interpreter has fresh namespaces; a session's sandbox keeps one set (its files persist).
static int warm_fresh;
static int session_mode;
static struct rs_huge_text_plan huge_plan = {.after = -1, .per_step = 0};  // python: 4 MiB, at once
// Forking a survey child (rs_fs_survey): not an execution, so not counted towards the huge-text move.
static int surveying;

// ---- small helpers ---------------------------------------------------------------------------------

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static int write_all(int fd, const void *data, size_t n) {
  const char *p = data;
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

// In an execution's process, before any program code (exec-isolation.h), with this loop's settings and,
// with fresh namespaces and per-execution uids, the next of its uids.
static unsigned current_exec_id(void) { return exec_id_count ? exec_id_base + (unsigned)(exec_id_seq % exec_id_count) : 0; }

static int isolate_exec(int fresh) { return rs_isolate_exec(&iso, fresh, fresh ? current_exec_id() : 0); }

static int read_exact(int fd, void *buf, size_t n) {
  char *p = buf;
  while (n > 0) {
    ssize_t r = read(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return -1;
    p += r;
    n -= (size_t)r;
  }
  return 0;
}

static uint32_t be32(const unsigned char *p) { return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3]; }

static void put_be32(unsigned char *p, uint32_t v) {
  p[0] = (unsigned char)(v >> 24);
  p[1] = (unsigned char)(v >> 16);
  p[2] = (unsigned char)(v >> 8);
  p[3] = (unsigned char)v;
}

// Reads one control frame into frame_buf; -1 at end of input.
static int read_frame(void) {
  unsigned char hdr[4];
  if (read_exact(CTL_IN, hdr, 4) != 0) return -1;
  uint32_t n = be32(hdr);
  if (n + 1 > frame_cap) {
    char *b = realloc(frame_buf, (size_t)n + 1);
    if (b == NULL) return -1;
    frame_buf = b;
    frame_cap = (size_t)n + 1;
  }
  if (read_exact(CTL_IN, frame_buf, n) != 0) return -1;
  frame_len = n;
  return 0;
}

struct field {
  const char *p;
  uint32_t n;
};

static int split_frame(struct field *f, int max) {
  int count = 0;
  uint32_t i = 0;
  while (i + 4 <= frame_len && count < max) {
    uint32_t n = be32((const unsigned char *)frame_buf + i);
    if (n > frame_len - i - 4) return -1;
    f[count].p = frame_buf + i + 4;
    f[count].n = n;
    count++;
    i += 4 + n;
  }
  return i == frame_len ? count : -1;
}

static int field_is(const struct field *f, const char *s) { return f->n == strlen(s) && memcmp(f->p, s, f->n) == 0; }

static void send_report(char fields[][48], int n) {
  unsigned char out[4 + 10 * (4 + 48)];
  size_t pos = 4;
  for (int i = 0; i < n; i++) {
    size_t len = strlen(fields[i]);
    put_be32(out + pos, (uint32_t)len);
    memcpy(out + pos + 4, fields[i], len);
    pos += 4 + len;
  }
  put_be32(out, (uint32_t)(pos - 4));
  if (write_all(CTL_OUT, out, pos) != 0) _exit(0);  // the host is gone: so is the sandbox
}

// ---- processes ---------------------------------------------------------------------------------------

// Reaps every exited child; records the status of `watch`. Returns 0 once no child is left.
static int reap(int block, pid_t watch, int *done, int *status) {
  for (;;) {
    int st;
    pid_t p = waitpid(-1, &st, block ? 0 : WNOHANG);
    if (p < 0) {
      if (errno == EINTR) continue;
      return 0;  // ECHILD
    }
    if (p == 0) return 1;
    if (p == watch) {
      *done = 1;
      *status = st;
    }
  }
}

// As namespace init, kill(-1) reaches every other process of the sandbox and never this one; reaping
// until ECHILD proves they are all gone.
static void kill_all(pid_t watch, int *done, int *status) {
  for (;;) {
    kill(-1, SIGKILL);
    if (!reap(1, watch, done, status)) return;
  }
}

static double proc_cpu_ms(pid_t pid) {
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return 0;
  buf[n] = 0;
  char *p = strrchr(buf, ')');
  if (p == NULL) return 0;
  // After ") ": state(3) ... utime is field 14, stime 15 (1-based over the whole line).
  unsigned long long ut = 0, st = 0;
  if (sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2) return 0;
  return (double)(ut + st) * 1000.0 / (double)sysconf(_SC_CLK_TCK);
}

// ---- the reset (mirrors supervisor.py) ---------------------------------------------------------------

static void read_own_state(struct own_state *s) {
  memset(s, 0, sizeof *s);
  for (int r = 0; r < RLIM_NLIMITS; r++) getrlimit(r, &s->lim[r]);
  errno = 0;
  s->nice = getpriority(PRIO_PROCESS, 0);
  if (errno) s->nice = -1000;
  s->sched = sched_getscheduler(0);
  CPU_ZERO(&s->affinity);
  sched_getaffinity(0, sizeof s->affinity, &s->affinity);
#ifdef SYS_ioprio_get
  s->ioprio = (int)syscall(SYS_ioprio_get, 1, 0);
#endif
}

static void read_pipe_state(int fd, struct pipe_state *s) {
  memset(s, 0, sizeof *s);
  s->flags = fcntl(fd, F_GETFL);
  s->pipe_size = fcntl(fd, F_GETPIPE_SZ);
  if (s->pipe_size >= 0) return;
  s->pipe_size = -1;
  for (size_t i = 0; i < N_SOCKOPTS; i++) {
    s->optlen[i] = sizeof s->opt[i];
    if (getsockopt(fd, SOL_SOCKET, SOCKOPTS[i], s->opt[i], &s->optlen[i]) != 0) {
      s->optlen[i] = 0;
      memcpy(s->opt[i], &errno, sizeof errno);
    }
  }
}

static int restore_pipe(int fd) {
  struct pipe_state now;
  if (fcntl(fd, F_SETFL, base_pipes[fd].flags) != 0) return 0;
  fcntl(fd, F_SETOWN, 0);
  fcntl(fd, F_SETSIG, 0);
  read_pipe_state(fd, &now);
  return memcmp(&now, &base_pipes[fd], sizeof now) == 0;
}

// Directory entries straight from getdents64: an opendir/fdopendir costs four more syscalls (dup, fstat,
// two fcntl) per directory, and the reset reads three directories after every execution.
struct linux_dirent64 {
  uint64_t d_ino;
  int64_t d_off;
  unsigned short d_reclen;
  unsigned char d_type;
  char d_name[];
};

static int is_dot(const char *n) { return n[0] == '.' && (n[1] == 0 || (n[1] == '.' && n[2] == 0)); }

// Calls `each` for every entry of the directory open on `fd` (from its start when `rewind`); -1 on a
// read error or when `each` refuses an entry.
static int list_dir(int fd, int rewind, int (*each)(void *ctx, const char *name, unsigned char type), void *ctx) {
  char buf[16384] __attribute__((aligned(8)));
  if (rewind && lseek(fd, 0, SEEK_SET) != 0) return -1;
  for (;;) {
    long n = syscall(SYS_getdents64, fd, buf, sizeof buf);
    if (n < 0) return -1;
    if (n == 0) return 0;
    for (long off = 0; off < n;) {
      struct linux_dirent64 *e = (struct linux_dirent64 *)(buf + off);
      off += e->d_reclen;
      if (!is_dot(e->d_name) && each(ctx, e->d_name, e->d_type) != 0) return -1;
    }
  }
}

struct name_list {
  size_t count, cap;
  char **names;
  unsigned char *types;
};

static int add_name(void *ctx, const char *name, unsigned char type) {
  struct name_list *l = ctx;
  if (l->count == l->cap) {
    size_t cap = l->cap ? l->cap * 2 : 16;
    char **nn = realloc(l->names, cap * sizeof *nn);
    if (nn) l->names = nn;
    unsigned char *nt = realloc(l->types, cap);
    if (nt) l->types = nt;
    if (!nn || !nt) return -1;
    l->cap = cap;
  }
  if ((l->names[l->count] = strdup(name)) == NULL) return -1;
  l->types[l->count++] = type;
  return 0;
}

// Empties the directory open on `dfd` (not closed here); *found: how many entries it held at the top.
// fd-relative, never following a symlink: the tree is the command's, made to trick us if it can (every
// process of it is dead by now, so nothing changes under us).
static int wipe_dir(int dfd, int depth, size_t *found) {
  *found = 0;
  if (depth > MAX_WIPE_DEPTH) return 0;
  // Names first, then removal: unlinking while reading a directory may skip entries.
  struct name_list l = {0, 0, NULL, NULL};
  int ok = list_dir(dfd, 0, add_name, &l) == 0;
  *found = l.count;
  for (size_t i = 0; i < l.count; i++) {
    int is_dir = l.types[i] == DT_DIR;
    if (l.types[i] == DT_UNKNOWN) {
      struct stat st;
      is_dir = fstatat(dfd, l.names[i], &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode);
    }
    if (is_dir) {
      fchmodat(dfd, l.names[i], 0700, 0);
      int sub = openat(dfd, l.names[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      size_t below;
      if (sub < 0 || !wipe_dir(sub, depth + 1, &below)) ok = 0;
      if (sub >= 0) close(sub);
      if (unlinkat(dfd, l.names[i], AT_REMOVEDIR) != 0) ok = 0;
    } else if (unlinkat(dfd, l.names[i], 0) != 0) {
      ok = 0;
    }
    free(l.names[i]);
  }
  free(l.names);
  free(l.types);
  return ok;
}

static int refuse_any(void *ctx, const char *name, unsigned char type) {
  (void)ctx, (void)name, (void)type;
  return -1;
}

static int wipe(void) {
  static const struct {
    const char *path;
    mode_t mode;
  } dirs[] = {{"/workspace", 0700}, {"/tmp", 01777}, {"/dev/shm", 01777}};
  int ok = 1;
  for (size_t i = 0; i < 3; i++) {
    int fd = open(dirs[i].path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
      ok = 0;
      continue;
    }
    int good = fchmod(fd, 0700) == 0;
    size_t found = 0;
    good = wipe_dir(fd, 0, &found) && good;
    char names[4096];
    ssize_t n = flistxattr(fd, names, sizeof names);
    if (n < 0) good = 0;
    for (ssize_t j = 0; j < n; j += (ssize_t)strlen(names + j) + 1)
      if (fremovexattr(fd, names + j) != 0) good = 0;
    good = fchmod(fd, dirs[i].mode) == 0 && good;
    struct timespec times[2] = {{0, 0}, {0, 0}};
    good = futimens(fd, times) == 0 && good;
    // Read again only when something was removed: nothing of the execution is alive to add entries, so a
    // directory read empty above is still empty.
    if (found > 0) good = list_dir(fd, 1, refuse_any, NULL) == 0 && good;
    close(fd);
    ok = ok && good;
  }
  return ok;
}

// How many objects of each kind (shm, sem, msg) this ipc namespace holds (the *_INFO commands), or -1.
static int sysv_ipc_count(int kind) {
  if (kind == 0) {
    struct shm_info info;
    return shmctl(0, SHM_INFO, (struct shmid_ds *)&info) < 0 ? -1 : info.used_ids;
  }
  if (kind == 1) {
    struct seminfo info;  // SEM_INFO: semusz is the number of sets
    return semctl(0, 0, SEM_INFO, &info) < 0 ? -1 : info.semusz;
  }
  struct msginfo info;  // MSG_INFO: msgpool is the number of queues
  return msgctl(0, MSG_INFO, (struct msqid_ds *)&info) < 0 ? -1 : info.msgpool;
}

// SysV IPC objects outlive their creator; they live in the sandbox's ipc namespace, so /proc/sysvipc
// lists exactly ours. Read only for a kind this namespace holds any of: nearly every command leaves none,
// and three /proc files an execution are three opens, reads and closes for pid 1.
static int remove_sysv_ipc(void) {
  static const char *kinds[] = {"/proc/sysvipc/shm", "/proc/sysvipc/sem", "/proc/sysvipc/msg"};
  int ok = 1;
  for (int k = 0; k < 3; k++) {
    if (sysv_ipc_count(k) == 0) continue;
    FILE *f = fopen(kinds[k], "re");
    if (f == NULL) {
      ok = 0;
      continue;
    }
    char line[512];
    int first = 1;
    while (fgets(line, sizeof line, f) != NULL) {
      if (first) {
        first = 0;
        continue;
      }
      long key;
      int id;
      if (sscanf(line, "%ld %d", &key, &id) != 2) continue;
      int r = k == 0 ? shmctl(id, IPC_RMID, NULL) : k == 1 ? semctl(id, 0, IPC_RMID) : msgctl(id, IPC_RMID, NULL);
      if (r != 0) ok = 0;
    }
    fclose(f);
  }
  return ok;
}

// Closed TCP connections outlive their processes (TIME_WAIT for a minute; orphans while they finish closing)
// in the sandbox's network namespace, where the next command could list their ports: nothing can remove
// them, so a sandbox that has any is not clean (its replacement comes with a new network namespace).
// /proc/net/sockstat{,6} count this namespace's; /proc/net/tcp would walk the whole machine's table.
// 1: none; 0: some; -1: the counts cannot be read (supervisor.py: tcp_left does the same).
static int tcp_counts_zero(void) {
  static const char *files[] = {"/proc/net/sockstat", "/proc/net/sockstat6"};
  static const char *lines[] = {"\nTCP: inuse ", "\nTCP6: inuse "};
  for (int i = 0; i < 2; i++) {
    int fd = open(files[i], O_RDONLY | O_CLOEXEC);
    if (fd < 0 && i == 1 && errno == ENOENT) continue;  // no IPv6
    if (fd < 0) return -1;
    char buf[1024];
    ssize_t n = read(fd, buf + 1, sizeof buf - 2);
    close(fd);
    if (n <= 0) return -1;
    buf[0] = '\n';
    buf[n + 1] = 0;
    const char *line = strstr(buf, lines[i]);
    if (line == NULL) return -1;
    long inuse = -1, tw = 0;
    line += strlen(lines[i]);
    // sockstat: "TCP: inuse N orphan N tw N ..." (orphan counts the whole machine's: skipped); sockstat6: "TCP6: inuse N".
    if (i == 0 ? sscanf(line, "%ld orphan %*d tw %ld", &inuse, &tw) != 2 : sscanf(line, "%ld", &inuse) != 1) return -1;
    if (inuse != 0 || tw != 0) return 0;
  }
  return 1;
}

// Whether the counts could be read, and were zero, when the supervisor started: else the check is off.
static int tcp_check;

static int reset_after_command(void) {
  int ok = wipe();
  ok = remove_sysv_ipc() && ok;
  if (tcp_check) ok = tcp_counts_zero() == 1 && ok;
  for (int fd = 1; fd <= 2; fd++) ok = restore_pipe(fd) && ok;
  struct own_state now;
  read_own_state(&now);
  return memcmp(&now, &base_state, sizeof now) == 0 && ok;
}

// ---- the hot path --------------------------------------------------------------------------------------

static void close_warm_fds(void) {
  if (warm_code_w >= 0) close(warm_code_w);
  if (warm_in_w >= 0) close(warm_in_w);
  warm_code_w = warm_in_w = -1;
}

static void discard_warm(void) {
  if (warm_pid <= 0) return;
  kill(warm_pid, SIGKILL);
  close_warm_fds();
  while (waitpid(warm_pid, NULL, 0) < 0 && errno == EINTR) {
  }
  warm_pid = -1;
}

// Forks the next warm interpreter. Returns 1 in the child (its program arrives on fd 3, stdin on fd 0),
// 0 in this process, -1 if it could not fork.
static int fork_warm(void) {
  int code[2], in[2];
  if (pipe2(code, O_CLOEXEC) != 0) return -1;
  if (pipe2(in, O_CLOEXEC) != 0) {
    close(code[0]);
    close(code[1]);
    return -1;
  }
  if (!surveying) rs_huge_text_step(&huge_plan);
  PyOS_BeforeFork();
  pid_t pid = fork();
  if (pid == 0) {
    PyOS_AfterFork_Child();
    // A session, so an autogroup, of its own (supervisor.py: child_common says why).
    if (setsid() < 0) _exit(127);
    // Isolated first, while the template user namespace's fd is still open (isolate_exec closes it).
    if (isolate_exec(!session_mode) != 0) _exit(127);
    // Sources out of the way first (above 64) so that targets never clobber each other.
    int hi_in = fcntl(in[0], F_DUPFD_CLOEXEC, 64), hi_code = fcntl(code[0], F_DUPFD_CLOEXEC, 64);
    if (hi_in < 0 || hi_code < 0 || dup2(hi_in, 0) < 0 || dup2(hi_code, 3) < 0) _exit(127);
    close_range(4, ~0U, 0);
    prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
    return 1;
  }
  PyOS_AfterFork_Parent();
  close(code[0]);
  close(in[0]);
  if (pid < 0) {
    close(code[1]);
    close(in[1]);
    return -1;
  }
  warm_pid = pid;
  warm_code_w = code[1];
  warm_in_w = in[1];
  warm_fresh = iso.enabled && !session_mode;
  return 0;
}

static int parse_i64(const char *s, size_t n, long long *out) {
  char buf[32];
  if (n == 0 || n >= sizeof buf) return -1;
  memcpy(buf, s, n);
  buf[n] = 0;
  char *end;
  errno = 0;
  *out = strtoll(buf, &end, 10);
  return errno || *end ? -1 : 0;
}

// "name=soft:hard ..." (supervisor.py: parse_rlimits + apply_rlimits): never above the hard limit the
// sandbox already has. cpu gets the seconds the warm interpreter spent starting (extra_cpu_s).
static int apply_rlimits(const struct field *f, pid_t pid, long long extra_cpu_s) {
  const char *p = f->p, *end = f->p + f->n;
  while (p < end) {
    while (p < end && *p == ' ') p++;
    const char *item = p;
    while (p < end && *p != ' ') p++;
    if (p == item) break;
    const char *eq = memchr(item, '=', (size_t)(p - item));
    if (eq == NULL) return -1;
    const char *colon = memchr(eq, ':', (size_t)(p - eq));
    long long soft, hard;
    if (parse_i64(eq + 1, (size_t)((colon ? colon : p) - eq - 1), &soft) != 0) return -1;
    if (colon ? parse_i64(colon + 1, (size_t)(p - colon - 1), &hard) != 0 : (hard = soft, 0)) return -1;
    size_t name_len = (size_t)(eq - item);
    int res = -1;
    for (size_t i = 0; i < N_RLIMIT_NAMES; i++)
      if (strlen(RLIMIT_NAMES[i].name) == name_len && memcmp(RLIMIT_NAMES[i].name, item, name_len) == 0) res = RLIMIT_NAMES[i].res;
    if (res < 0) continue;
    if (res == RLIMIT_CPU) {
      soft += extra_cpu_s;
      hard += extra_cpu_s;
    }
    // The warm interpreter was forked after the last reset had checked this process's limits against
    // base_state, so its own limits are base_state's: no need to ask the kernel.
    struct rlimit cur = base_state.lim[res], want = {(rlim_t)soft, (rlim_t)hard};
    if (cur.rlim_max != RLIM_INFINITY) {
      if (want.rlim_max > cur.rlim_max) want.rlim_max = cur.rlim_max;
      if (want.rlim_cur > want.rlim_max) want.rlim_cur = want.rlim_max;
    }
    if (prlimit(pid, res, &want, NULL) != 0) return -1;
  }
  return 0;
}

static void drain_wake(void) {
  char buf[512];
  while (read(wake_fd, buf, sizeof buf) > 0) {
  }
}

// Runs one "once" python command on the warm interpreter and reports it. Returns 0 when done, -1 when
// it could not launch (nothing has run: the caller hands the frame to the Python loop).
static int run_once(struct field *req) {
  double t0 = now_s();
  double deadline;
  long long wall_ms;
  if (parse_i64(req[4].p, req[4].n, &wall_ms) != 0) return -1;
  deadline = t0 + (double)wall_ms / 1000.0;
  struct rusage ru0, ru1;
  getrusage(RUSAGE_CHILDREN, &ru0);
  pid_t pid = warm_pid;
  double startup = proc_cpu_ms(pid);
  long long extra_cpu_s = (long long)(startup / 1000.0);
  if ((double)extra_cpu_s * 1000.0 < startup) extra_cpu_s++;  // whole seconds, rounded up (supervisor.py)
  if (apply_rlimits(&req[5], pid, extra_cpu_s) != 0) return -1;
  if (write_all(warm_code_w, req[2].p, req[2].n) != 0) return -1;
  close(warm_code_w);
  warm_code_w = -1;
  int in_w = warm_in_w;
  warm_in_w = -1;
  warm_pid = -1;
  double t_start = now_s();
  const char *stdin_p = req[3].p;
  size_t stdin_n = req[3].n;
  fcntl(in_w, F_SETFL, fcntl(in_w, F_GETFL) | O_NONBLOCK);
  if (stdin_n == 0) {
    close(in_w);
    in_w = -1;
  }
  int timed_out = 0, killed = 0, done = 0, status = 0;
  reap(0, pid, &done, &status);
  while (!done) {
    double remaining = deadline - now_s();
    if (remaining <= 0 && !timed_out && !killed) {
      timed_out = 1;
      kill_all(pid, &done, &status);
      continue;
    }
    struct pollfd fds[3] = {{wake_fd, POLLIN, 0}, {CTL_IN, POLLIN, 0}, {in_w, POLLOUT, 0}};
    int nfds = in_w >= 0 ? 3 : 2;
    int ms = remaining > 0 ? (int)(remaining * 1000.0) + 1 : 1;
    if (poll(fds, (nfds_t)nfds, ms) > 0) {
      if (fds[0].revents) drain_wake();
      if (fds[1].revents) {
        if (read_frame() != 0) {
          kill_all(pid, &done, &status);
          _exit(0);
        }
        struct field f[MAX_FIELDS];
        if (split_frame(f, MAX_FIELDS) > 0 && field_is(&f[0], "kill")) {
          killed = 1;
          kill_all(pid, &done, &status);
        }
      }
      if (in_w >= 0 && fds[2].revents) {
        ssize_t n = write(in_w, stdin_p, stdin_n > 65536 ? 65536 : stdin_n);
        if (n > 0) {
          stdin_p += n;
          stdin_n -= (size_t)n;
        } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
          stdin_n = 0;
        }
        if (stdin_n == 0) {
          close(in_w);
          in_w = -1;
        }
      }
    }
    reap(0, pid, &done, &status);
  }
  double wall = (now_s() - t_start) * 1000.0;
  if (in_w >= 0) close(in_w);
  kill_all(pid, &done, &status);
  getrusage(RUSAGE_CHILDREN, &ru1);
  double cpu = (double)(ru1.ru_utime.tv_sec - ru0.ru_utime.tv_sec + ru1.ru_stime.tv_sec - ru0.ru_stime.tv_sec) * 1000.0 +
               (double)(ru1.ru_utime.tv_usec - ru0.ru_utime.tv_usec + ru1.ru_stime.tv_usec - ru0.ru_stime.tv_usec) / 1000.0 - startup;
  if (cpu < 0) cpu = 0;
  // The end marker is created after every process of the command is dead: nothing can forge it.
  unsigned char rnd[12];
  if (getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd) _exit(1);
  char fields[10][48];
  char *nonce = fields[7];
  for (int i = 0; i < 12; i++) snprintf(nonce + 2 * i, 3, "%02x", rnd[i]);
  char marker[48];
  int mlen = snprintf(marker, sizeof marker, "%crs-end:%s%c", 0, nonce, 0);
  if (write_all(1, marker, (size_t)mlen) != 0 || write_all(2, marker, (size_t)mlen) != 0) _exit(0);
  snprintf(fields[0], 48, "done");
  fields[1][0] = fields[2][0] = 0;
  if (WIFEXITED(status)) {
    snprintf(fields[1], 48, "%d", WEXITSTATUS(status));
  } else if (WIFSIGNALED(status)) {
    int s = WTERMSIG(status);
    if (s > 0 && s < NSIG_NAMES && sig_names[s][0])
      snprintf(fields[2], 48, "%s", sig_names[s]);
    else
      snprintf(fields[2], 48, "SIG%d", s);
  }
  snprintf(fields[3], 48, "%d", timed_out);
  snprintf(fields[4], 48, "%d", killed);
  snprintf(fields[5], 48, "%.3f", cpu);
  snprintf(fields[6], 48, "%.3f", wall);
  fields[8][0] = 0;
  // The report goes before the reset: every process of the command is dead and its output ends at the
  // marker, so nothing the reset does can change the result, and the reply no longer waits for it. "p": the
  // host gives this sandbox no other command until the "reset" frame says whether it came back clean
  // (supervisor.py's loop still reports both at once).
  snprintf(fields[9], 48, "p");
  send_report(fields, 10);
  char reset[2][48];
  snprintf(reset[0], 48, "reset");
  snprintf(reset[1], 48, "%d", reset_after_command());
  send_report(reset, 2);
  return 0;
}

// ---- entry points (called from supervisor.py) ---------------------------------------------------------

// Records pid 1's state before any command ran, the signal wake-up fd, and signal names (NUL-separated,
// index = signal number, as supervisor.py's SIGNAMES). Returns 0.
long rs_fs_init(int wake, const char *names, long names_len) {
  if (initialized) return 0;
  initialized = 1;
  wake_fd = wake;
  read_own_state(&base_state);
  for (int fd = 1; fd <= 2; fd++) read_pipe_state(fd, &base_pipes[fd]);
  tcp_check = tcp_counts_zero() == 1;
  long i = 0;
  for (int s = 0; s < NSIG_NAMES && i < names_len; s++) {
    size_t n = strnlen(names + i, (size_t)(names_len - i));
    snprintf(sig_names[s], sizeof sig_names[s], "%.*s", (int)n, names + i);
    i += (long)n + 1;
  }
  return 0;
}

// Serves commands until one needs the Python loop. fork_first: fork a warm python interpreter before
// the first request. Returns int 0 in a forked warm interpreter (its program is on fd 3), None when the
// host closed the control channel, int 1 when the last command asked for a node interpreter next
// (the Python loop starts it), or the raw body of a frame the Python loop must handle (the warm python
// interpreter, if any, is then the Python loop's: rs_fs_warm()).
PyObject *rs_fs_serve(int fork_first) {
  if (fork_first && warm_pid <= 0) {
    int r = fork_warm();
    if (r == 1) return PyLong_FromLong(0);
  }
  for (;;) {
    if (read_frame() != 0) {
      Py_IncRef(&_Py_NoneStruct);
      return &_Py_NoneStruct;
    }
    struct field req[MAX_FIELDS];
    int n = split_frame(req, MAX_FIELDS);
    if (n >= 1 && !field_is(&req[0], "run") && !field_is(&req[0], "once")) continue;  // a late "kill": nothing runs
    int hot = n == 7 && field_is(&req[0], "once") && field_is(&req[1], "python") && warm_pid > 0 && warm_fresh == iso.enabled;
    if (!hot || run_once(req) != 0) return PyBytes_FromStringAndSize(frame_buf, frame_len);
    if (field_is(&req[6], "python")) {
      int r = fork_warm();
      if (r == 1) return PyLong_FromLong(0);
    } else if (field_is(&req[6], "node")) {
      return PyLong_FromLong(1);
    }
  }
}

// The warm python interpreter this loop holds, handed to the Python loop: which = 0 pid, 1 the write
// end of its program pipe, 2 the write end of its stdin pipe, 4 whether it has fresh namespaces.
// which = 3 forgets it (the caller owns it).
long rs_fs_warm(int which) {
  switch (which) {
    case 0:
      return warm_pid;
    case 1:
      return warm_code_w;
    case 2:
      return warm_in_w;
    case 4:
      return warm_fresh;
    default:
      warm_pid = -1;
      warm_code_w = warm_in_w = -1;
      return 0;
  }
}

// Kills the warm interpreter this loop holds, if any.
long rs_fs_discard(void) {
  discard_warm();
  return 0;
}

// Turns fresh namespaces per execution on: mounts is "path:mode:bytes;..." (the tmpfs folders to make),
// filter the per-execution seccomp program (struct sock_filter[]). Returns 0, or -1 when they do not parse.
// Also makes the template user namespace executions enter (exec-isolation.h); without one (it could not be
// made) each execution unshares its own.
long rs_fs_configure(const char *mounts, const char *filter, long filter_len) {
  if (rs_exec_isolation_parse(&iso, mounts, filter, filter_len) != 0) return -1;
  rs_exec_isolation_template(&iso);
  return 0;
}

static void take_next_exec_id(void) { exec_id_seq++; }

// Turns per-execution uids on (after rs_fs_configure): each execution's process switches to one of
// [base, base + count) before it unshares (isolate_exec). This process keeps CAP_SETUID and CAP_SETGID for
// that, CAP_SYS_RESOURCE to set an execution's rlimits (prlimit on another uid's process; in a user
// namespace it raises no limit) and CAP_KILL to kill and reap what runs under those uids, but no longer as
// ambient or inheritable capabilities: a program it runs without isolate_exec (none should) would lose them
// at its exec.
// Returns 0, or -errno (-EPERM when those capabilities are missing).
long rs_fs_exec_ids(long base, long count) {
  if (!iso.enabled || base <= 0 || count <= 0 || base + count > 0x7fffffffL) return -EINVAL;
  struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct data[2];
  if (syscall(SYS_capget, &hdr, data) != 0) return -errno;
  const unsigned need = (1u << CAP_SETUID) | (1u << CAP_SETGID) | (1u << CAP_KILL) | (1u << CAP_SYS_RESOURCE);
  if ((data[0].effective & need) != need) return -EPERM;
  if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0 && errno != EINVAL) return -errno;
  data[0].inheritable = data[1].inheritable = 0;
  if (syscall(SYS_capset, &hdr, data) != 0) return -errno;
  if (!exec_id_count && pthread_atfork(take_next_exec_id, NULL, NULL) != 0) return -ENOMEM;
  // Each execution switches to its uid, then unshares a user namespace of its own: the template's owner is
  // this process's uid, so it would give an execution under another uid no capabilities.
  rs_exec_isolation_drop_template(&iso);
  exec_id_base = (unsigned)base;
  exec_id_count = (unsigned)count;
  return 0;
}

// The next per-execution uid, for an execution this loop does not fork (the node fork server's: it switches
// its child to this uid); 0 without per-execution uids.
long rs_fs_take_exec_id(void) {
  unsigned id = current_exec_id();
  if (id) exec_id_seq++;
  return (long)id;
}

// In the process the Python loop forked to exec the node fork server: CAP_SETUID and CAP_SETGID survive
// that exec (inheritable and ambient), so the server can switch each child to its execution's uid. The
// server runs no program code; each child drops every capability before it does (exec-isolation.h).
// Returns 0, or -errno.
long rs_fs_keep_setid_caps_across_exec(void) {
  struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct data[2];
  if (syscall(SYS_capget, &hdr, data) != 0) return -errno;
  data[0].inheritable = (1u << CAP_SETUID) | (1u << CAP_SETGID);
  data[1].inheritable = 0;
  if (syscall(SYS_capset, &hdr, data) != 0) return -errno;
  if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, CAP_SETUID, 0, 0) != 0) return -errno;
  if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, CAP_SETGID, 0, 0) != 0) return -errno;
  return 0;
}

// In a process the Python loop forked for an execution (supervisor.py: child_common): see isolate_exec.
// Returns 0, or -errno.
long rs_fs_isolate(int fresh) {
  return isolate_exec(fresh) == 0 ? 0 : -errno;
}

// The interpreter's code onto huge pages (huge-text.h) before the fork that follows `after` forks of python
// executions (this loop's and the Python loop's, which calls rs_fs_before_fork). Returns 0.
long rs_fs_huge_text_after(long after) {
  huge_plan.after = after;
  return 0;
}

// Before a fork of a python execution by the Python loop. Returns 0.
long rs_fs_before_fork(void) {
  rs_huge_text_step(&huge_plan);
  return 0;
}

// A session's sandbox: its executions share one set of namespaces and folders (files persist between
// commands); warm interpreters forked from now on are not given fresh ones.
long rs_fs_set_session(void) {
  session_mode = 1;
  return 0;
}

// The hot set (pin-hot.h): forks a survey child as an execution is forked (fork_warm), its output on
// /dev/null, and gives it `code` as its program. Returns 1 in the child (supervisor.py runs it as a warm
// interpreter, then calls rs_fs_survey_report), 0 here once it exited, or -errno.
long rs_fs_survey(const char *code, long n) {
  if (warm_pid > 0 || rs_pin_survey_buf) return -EBUSY;
  int begun = rs_pin_survey_begin();
  if (begun != 0) return begun;
  surveying = 1;
  int r = fork_warm();
  surveying = 0;
  if (r == 1) {
    int null = open("/dev/null", O_WRONLY);
    if (null < 0 || dup2(null, 1) < 0 || dup2(null, 2) < 0) _exit(127);
    close(null);
    alarm(10);
    return 1;
  }
  if (r < 0) return -errno;
  write_all(warm_code_w, code, (size_t)n);
  pid_t pid = warm_pid;
  close_warm_fds();
  warm_pid = -1;
  while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
  }
  return 0;
}

// In a survey child, after its program: lists the pages it wrote (a no-op in any other process).
long rs_fs_survey_report(void) {
  rs_pin_survey_report();
  return 0;
}

// After the survey: pins (at most max_pages of) the pages it listed. Returns how many, or -errno.
long rs_fs_pin_surveyed(long max_pages) {
  return rs_pin_survey_end(max_pages > 0 ? (uint64_t)max_pages : 0);
}

// Loads `filter` (struct sock_filter[]) on this process, on top of the sandbox's: what it forks from then on
// inherits both. Returns 0, or -errno.
long rs_fs_seal(const char *filter, long len) {
  if (len % (long)sizeof(struct sock_filter)) return -EINVAL;
  return rs_pin_seal((const struct sock_filter *)filter, len / (long)sizeof(struct sock_filter));
}
