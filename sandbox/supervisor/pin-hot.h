// Pages every execution writes, copied at fork instead of on first write (the fork server's "hot set").
//
// Why: fork shares each of this process's pages with the child copy-on-write, and a child's first write
// to one is a fault that copies it and flushes its old translation. On a paravirtualized host with shadow
// page tables the flush is a hypercall, many times what fork's own copy of a page costs; an execution writes
// hundreds of such pages (reference counts of the objects it uses, the allocator's pools, frames), whatever
// its program (sandbox/README.md has the figures).
// The kernel copies a page at fork, for the child, when it is pinned (a long-term pin, as a DMA buffer has:
// fork cannot share it). io_uring's registered buffers are such pins, taken from user space: this process
// pins the pages an execution writes and every child gets them already copied, with no fault and no flush
// in it or here.
//
// Which pages: a survey. A child forked as an execution is, running a known program, lists the pages of
// its writable private mappings that are present and exclusively its own (pagemap: copied on write, or
// new); it writes the list into a shared mapping, and this process keeps those it has itself (present,
// anonymous, in a writable private mapping), at most `max_pages`. No program of a request is surveyed.
//
// The ring is registered with the task (IORING_REGISTER_RING_FDS) and its fd closed: no execution
// inherits an fd to it (and io_uring's task context is not copied at fork). That needs Linux 5.18; pinned
// pages count against RLIMIT_MEMLOCK. Where a step fails nothing is pinned and forks copy on write as before.
// Why io_uring may be used here at all, and never by a program: sandbox/README.md, "io_uring at a sandbox's
// start".
#ifndef RS_PIN_HOT_H
#define RS_PIN_HOT_H
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/io_uring.h>
#include <linux/seccomp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#define RS_PIN_PAGE 4096UL
#define RS_PIN_SURVEY_CAP 16384UL

#define RS_PM_PRESENT (1ULL << 63)
#define RS_PM_FILE (1ULL << 61)
#define RS_PM_EXCLUSIVE (1ULL << 56)

// The shared list a survey child fills: [0] = count, then page addresses.
static uint64_t *rs_pin_survey_buf;

// A writable private mapping of /proc/self/maps ("start-end rw-p ..."), at most `max` of them, into a
// fresh mapping (not one of the surveyed pages). Returns how many, or -1.
static long rs_pin_writable_ranges(uint64_t (*out)[2], long max) {
  int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  size_t cap = 1 << 20, len = 0;
  char *text = mmap(NULL, cap, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (text == MAP_FAILED) {
    close(fd);
    return -1;
  }
  for (;;) {
    ssize_t r = read(fd, text + len, cap - 1 - len);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    len += (size_t)r;
  }
  close(fd);
  text[len] = 0;
  long n = 0;
  for (char *line = text; *line && n < max;) {
    char *end = strchr(line, '\n');
    unsigned long lo, hi;
    char perms[5];
    if (sscanf(line, "%lx-%lx %4s", &lo, &hi, perms) == 3 && perms[0] == 'r' && perms[1] == 'w' && perms[3] == 'p') {
      out[n][0] = lo;
      out[n][1] = hi;
      n++;
    }
    if (!end) break;
    line = end + 1;
  }
  munmap(text, cap);
  return n;
}

// Calls each(ctx, page address, pagemap entry) for every page of every writable private mapping but
// [skip, skip + skip_len) and its own scratch memory (neither is a page an execution writes).
static int rs_pin_each_page(void (*each)(void *ctx, uint64_t addr, uint64_t pm), void *ctx, const void *skip, size_t skip_len) {
  enum { MAX_RANGES = 4096 };
  uint64_t(*ranges)[2] = mmap(NULL, sizeof(uint64_t[MAX_RANGES][2]), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (ranges == MAP_FAILED) return -1;
  long n = rs_pin_writable_ranges(ranges, MAX_RANGES);
  // A process that is not dumpable (pid 1 is not: supervisor.py says why) cannot open its own pagemap,
  // which then belongs to root. Dumpable just for the open: nothing but this process runs meanwhile
  // (the survey child has exited; no request was served yet).
  int dumpable = prctl(PR_GET_DUMPABLE, 0, 0, 0, 0);
  if (dumpable == 0) prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
  int pm = n >= 0 ? open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC) : -1;
  if (dumpable == 0) prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  if (pm < 0) {
    munmap(ranges, sizeof(uint64_t[MAX_RANGES][2]));
    return -1;
  }
  enum { CHUNK = 512 };
  uint64_t entries[CHUNK];
  for (long i = 0; i < n; i++) {
    for (uint64_t a = ranges[i][0]; a < ranges[i][1]; a += CHUNK * RS_PIN_PAGE) {
      uint64_t pages = (ranges[i][1] - a) / RS_PIN_PAGE;
      if (pages > CHUNK) pages = CHUNK;
      ssize_t r = pread(pm, entries, pages * 8, (off_t)(a / RS_PIN_PAGE * 8));
      if (r <= 0) break;
      for (uint64_t k = 0; k < (uint64_t)r / 8; k++) {
        uint64_t at = a + k * RS_PIN_PAGE;
        if (at - (uint64_t)ranges < sizeof(uint64_t[MAX_RANGES][2]) || at - (uint64_t)skip < skip_len) continue;
        each(ctx, at, entries[k]);
      }
    }
  }
  close(pm);
  munmap(ranges, sizeof(uint64_t[MAX_RANGES][2]));
  return 0;
}

// Before the survey child is forked: the shared list. Returns 0 or -errno.
static int rs_pin_survey_begin(void) {
  void *p = mmap(NULL, (RS_PIN_SURVEY_CAP + 1) * 8, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return -errno;
  rs_pin_survey_buf = p;
  return 0;
}

static void rs_pin_note_exclusive(void *ctx, uint64_t addr, uint64_t pm) {
  (void)ctx;
  uint64_t *b = rs_pin_survey_buf;
  if ((pm & RS_PM_PRESENT) && (pm & RS_PM_EXCLUSIVE) && !(pm & RS_PM_FILE) && b[0] < RS_PIN_SURVEY_CAP) b[1 + b[0]++] = addr;
}

// In the survey child, after its program: the pages it owns alone. A no-op in any other process.
static void rs_pin_survey_report(void) {
  if (rs_pin_survey_buf) rs_pin_each_page(rs_pin_note_exclusive, NULL, NULL, 0);
}

struct rs_pin_keep {
  const uint64_t *want;  // sorted
  uint64_t n, at;
  struct iovec *iov;
  uint64_t niov, pages, max_pages;
};

static int rs_pin_cmp(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

// Pages are visited in address order (ranges in maps order): a merge against the sorted wanted list.
static void rs_pin_note_own(void *ctx, uint64_t addr, uint64_t pm) {
  struct rs_pin_keep *k = ctx;
  while (k->at < k->n && k->want[k->at] < addr) k->at++;
  if (k->at >= k->n || k->want[k->at] != addr || k->pages >= k->max_pages) return;
  if (!(pm & RS_PM_PRESENT) || (pm & RS_PM_FILE)) return;
  struct iovec *last = k->niov ? &k->iov[k->niov - 1] : NULL;
  if (last && (uint64_t)last->iov_base + last->iov_len == addr) {
    last->iov_len += RS_PIN_PAGE;
  } else {
    k->iov[k->niov].iov_base = (void *)addr;
    k->iov[k->niov].iov_len = RS_PIN_PAGE;
    k->niov++;
  }
  k->pages++;
}

// After the survey child exited: pins the listed pages this process has (at most max_pages) and drops the
// list. Returns the pages pinned, or -errno (nothing pinned).
static long rs_pin_survey_end(uint64_t max_pages) {
  uint64_t *b = rs_pin_survey_buf;
  if (!b) return -EINVAL;
  rs_pin_survey_buf = NULL;
  uint64_t n = b[0] < RS_PIN_SURVEY_CAP ? b[0] : RS_PIN_SURVEY_CAP;
  qsort(b + 1, n, 8, rs_pin_cmp);
  struct rs_pin_keep k = {b + 1, n, 0, NULL, 0, 0, max_pages};
  k.iov = mmap(NULL, (n + 1) * sizeof(struct iovec), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  long ret = 0;
  if (k.iov == MAP_FAILED) {
    ret = -errno;
  } else if (n && rs_pin_each_page(rs_pin_note_own, &k, k.iov, (n + 1) * sizeof(struct iovec)) == 0 && k.niov) {
    struct io_uring_params params;
    memset(&params, 0, sizeof params);
    int ring = (int)syscall(SYS_io_uring_setup, 1, &params);
    if (ring < 0) {
      ret = -errno;
    } else {
      struct io_uring_rsrc_update reg = {.offset = -1U, .data = (uint64_t)ring};
      if (syscall(SYS_io_uring_register, ring, IORING_REGISTER_BUFFERS, k.iov, (unsigned)k.niov) != 0)
        ret = -errno;
      else if (syscall(SYS_io_uring_register, ring, IORING_REGISTER_RING_FDS, &reg, 1) != 1)
        ret = -errno;  // the ring (and its pins) goes with the fd below
      else
        ret = (long)k.pages;
      close(ring);
    }
    munmap(k.iov, (n + 1) * sizeof(struct iovec));
  } else {
    munmap(k.iov, (n + 1) * sizeof(struct iovec));
  }
  munmap(b, (RS_PIN_SURVEY_CAP + 1) * 8);
  return ret;
}

// The seal: loads `insns` seccomp instructions (io_uring refused) on this process, on top of the sandbox's
// filter, once its pins are taken; what it forks from then on inherits both. Returns 0, or -errno.
static int rs_pin_seal(const struct sock_filter *insns, long n) {
  struct sock_fprog prog = {(unsigned short)n, (struct sock_filter *)insns};
  if (n <= 0 || n > 4096) return -EINVAL;
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return -errno;
  return syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) == 0 ? 0 : -errno;
}

#endif
