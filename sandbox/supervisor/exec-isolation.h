// How one execution's process is isolated before any program code runs, shared by the two fork servers
// that make such processes: pid 1's C loop (forkserver.c) and the node fork server (nodefork.c). Both
// include this file (static functions: each library gets its own copy, nothing is exported).
//
// With fresh = 1 the process gets its own mount and ipc namespaces and its own tmpfs folders, made in a user
// namespace where it holds the capabilities to make them: the fork server's template (below: entered with
// setns, inside it the execution keeps the sandbox's uid and gid) or, with per-execution uids, one of its
// own (unshared after it switched to its uid, which it keeps outside). Then, fresh or not, it drops every
// capability, bounding set included, and loads the per-execution seccomp filter (unshare, setns and mount
// refused).
#ifndef RS_EXEC_ISOLATION_H
#define RS_EXEC_ISOLATION_H
#ifndef _GNU_SOURCE
#define _GNU_SOURCE  // setresuid, unshare (the including file defines it before any header)
#endif
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define RS_MAX_FRESH_MOUNTS 4
#define RS_MAX_FILTER_INSNS 64

struct rs_exec_isolation {
  int enabled;
  struct {
    char path[64];
    char opts[64];
  } mounts[RS_MAX_FRESH_MOUNTS];
  int n_mounts;
  struct sock_filter filter[RS_MAX_FILTER_INSNS];
  unsigned short filter_len;
  // The template user namespace (rs_exec_isolation_template), or -1: each fresh execution unshares one.
  int userns_fd;
};

static int rs_write_file(const char *path, const char *text) {
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  size_t n = strlen(text);
  ssize_t w = write(fd, text, n);
  close(fd);
  return w == (ssize_t)n ? 0 : -1;
}

// In a process that has just unshared a user namespace: setgroups denied, then uid and gid mapped (one each,
// inside -> outside). Returns 0, or -1 with errno set and *step naming the write that failed.
static int rs_write_id_maps(unsigned uid, unsigned outer_uid, unsigned gid, unsigned outer_gid, const char **step) {
  char map[64];
  *step = "setgroups";
  if (rs_write_file("/proc/self/setgroups", "deny") != 0) return -1;
  *step = "uid_map";
  snprintf(map, sizeof map, "%u %u 1", uid, outer_uid);
  if (rs_write_file("/proc/self/uid_map", map) != 0) return -1;
  *step = "gid_map";
  snprintf(map, sizeof map, "%u %u 1", gid, outer_gid);
  return rs_write_file("/proc/self/gid_map", map);
}

// mounts is "path:mode:bytes;..." (the tmpfs folders to make), filter the per-execution seccomp program
// (struct sock_filter[]). Returns 0, or -1 when they do not parse; iso is enabled only on success.
static int rs_exec_isolation_parse(struct rs_exec_isolation *iso, const char *mounts, const char *filter, long filter_len) {
  iso->enabled = 0;
  iso->n_mounts = 0;
  iso->userns_fd = -1;
  const char *p = mounts;
  while (*p && iso->n_mounts < RS_MAX_FRESH_MOUNTS) {
    const char *end = strchr(p, ';');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    char item[160];
    if (len == 0 || len >= sizeof item) return -1;
    memcpy(item, p, len);
    item[len] = 0;
    char *c1 = strchr(item, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
    if (!c2) return -1;
    *c1 = *c2 = 0;
    if (strlen(item) >= sizeof iso->mounts[0].path) return -1;
    snprintf(iso->mounts[iso->n_mounts].path, sizeof iso->mounts[0].path, "%s", item);
    if (snprintf(iso->mounts[iso->n_mounts].opts, sizeof iso->mounts[0].opts, "size=%s,mode=%s", c2 + 1, c1 + 1) >= (int)sizeof iso->mounts[0].opts)
      return -1;
    iso->n_mounts++;
    p += len + (end ? 1 : 0);
  }
  if (*p) return -1;  // more folders than there is room for
  if (filter_len <= 0 || filter_len % (long)sizeof(struct sock_filter) != 0 || filter_len / (long)sizeof(struct sock_filter) > RS_MAX_FILTER_INSNS) return -1;
  memcpy(iso->filter, filter, (size_t)filter_len);
  iso->filter_len = (unsigned short)(filter_len / (long)sizeof(struct sock_filter));
  iso->enabled = 1;
  return 0;
}

// The template user namespace, made once by a fork server (after rs_exec_isolation_parse): a helper child
// unshares it and maps the sandbox's uid and gid to themselves, the server keeps it open and the helper exits.
// Each fresh execution without a uid of its own then enters it (setns: its owner's processes hold every
// capability in it) instead of unsharing a user namespace and writing its maps, which was half of what fresh
// namespaces cost an execution (the first open of a new process's /proc files). What a user namespace holds that an execution could write is refused to it or
// gone with its processes: keyrings (seccomp), sysctls (read-only /proc/sys, no capabilities), rlimit
// counts. Returns 0, or -1 (iso->userns_fd stays -1: executions unshare their own, as before).
static int rs_exec_isolation_template(struct rs_exec_isolation *iso) {
  if (!iso->enabled) return -1;
  if (iso->userns_fd >= 0) return 0;
  int ready[2], hold[2];
  if (pipe2(ready, O_CLOEXEC) != 0) return -1;
  if (pipe2(hold, O_CLOEXEC) != 0) {
    close(ready[0]);
    close(ready[1]);
    return -1;
  }
  uid_t uid = getuid();
  gid_t gid = getgid();
  pid_t pid = fork();
  if (pid == 0) {
    close(ready[0]);
    close(hold[1]);
    const char *step;
    // Dumpable, as an execution is before it writes its maps: else /proc/self's files belong to root.
    char ok = prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) == 0 && unshare(CLONE_NEWUSER) == 0 && rs_write_id_maps(uid, uid, gid, gid, &step) == 0;
    if (write(ready[1], &ok, 1) == 1 && ok) {
      char b;
      while (read(hold[0], &b, 1) < 0 && errno == EINTR) {
      }  // until the server has opened the namespace (or is gone)
    }
    _exit(0);
  }
  close(ready[1]);
  close(hold[0]);
  char ok = 0;
  if (pid > 0) {
    while (read(ready[0], &ok, 1) < 0 && errno == EINTR) {
    }
    if (ok) {
      char path[64];
      snprintf(path, sizeof path, "/proc/%d/ns/user", (int)pid);
      int fd = open(path, O_RDONLY | O_CLOEXEC);
      // Above 64, out of the way of the fds a child takes over for its program (0-4) before it isolates.
      if (fd >= 0) {
        iso->userns_fd = fcntl(fd, F_DUPFD_CLOEXEC, 64);
        close(fd);
      }
    }
  }
  close(hold[1]);
  close(ready[0]);
  // The server's own SIGCHLD handling may reap the helper first (ECHILD): either way it is gone.
  if (pid > 0)
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
    }
  return iso->userns_fd >= 0 ? 0 : -1;
}

// The fork server gives up its template (per-execution uids: each execution unshares its own).
static inline void rs_exec_isolation_drop_template(struct rs_exec_isolation *iso) {
  if (iso->userns_fd >= 0) close(iso->userns_fd);
  iso->userns_fd = -1;
}

// exec_uid: with fresh, the uid (and gid) to switch to before unsharing, or 0 for none. Returns 0, or -1 with
// errno set (one line said on stderr): the caller must then exit without running the program.
static int rs_isolate_exec(const struct rs_exec_isolation *iso, int fresh, unsigned exec_uid) {
  if (!iso->enabled) return 0;
  const char *step = "";
  // The template stays the server's: no program gets a handle on it (closed on success and failure alike).
  int template_fd = iso->userns_fd;
#define STEP(name, ok)  \
  do {                    \
    step = (name);        \
    if (!(ok)) goto fail; \
  } while (0)
  if (fresh) {
    uid_t uid = getuid(), outer_uid = uid;
    gid_t gid = getgid(), outer_gid = gid;
    if (exec_uid) {
      STEP("setgroups(0)", setgroups(0, NULL) == 0);
      STEP("setresgid", setresgid(exec_uid, exec_uid, exec_uid) == 0);
      STEP("setresuid", setresuid(exec_uid, exec_uid, exec_uid) == 0);
      outer_uid = exec_uid;
      outer_gid = exec_uid;
    }
    // Dumpable first (after any uid switch, which clears it): /proc/self's files belong to root, not to this
    // process, while it is not (the fork servers never are).
    STEP("dumpable", prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) == 0);
    if (!exec_uid && iso->userns_fd >= 0) {
      STEP("setns", setns(iso->userns_fd, CLONE_NEWUSER) == 0);
      STEP("unshare", unshare(CLONE_NEWNS | CLONE_NEWIPC) == 0);
    } else {
      STEP("unshare", unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWIPC) == 0);
      if (rs_write_id_maps(uid, outer_uid, gid, outer_gid, &step) != 0) goto fail;
    }
    for (int i = 0; i < iso->n_mounts; i++) STEP(iso->mounts[i].path, mount("tmpfs", iso->mounts[i].path, "tmpfs", MS_NOSUID | MS_NODEV, iso->mounts[i].opts) == 0);
    STEP("chdir", chdir("/workspace") == 0);
  }
  // The new user namespace gave this process every capability in it: drop them all, bounding set included.
  STEP("ambient", prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) == 0 || errno == EINVAL);
  for (int c = 0; c <= 63; c++)
    if (prctl(PR_CAPBSET_DROP, c, 0, 0, 0) != 0 && errno == EINVAL) break;
  struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct data[2];
  memset(data, 0, sizeof data);
  STEP("capset", syscall(SYS_capset, &hdr, data) == 0);
  STEP("no_new_privs", prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0);
  struct sock_fprog prog = {iso->filter_len, (struct sock_filter *)iso->filter};
  STEP("seccomp", prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) == 0);
  if (template_fd >= 0) close(template_fd);
  return 0;
#undef STEP
fail:;
  int e = errno;
  if (template_fd >= 0) close(template_fd);
  dprintf(2, "rollstream sandbox: could not isolate the execution (%s): %s\n", step, strerror(e));
  errno = e;
  return -1;
}
#endif
