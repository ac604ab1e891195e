// Moves an interpreter's code onto transparent huge pages, in the process that forks every execution (a
// sandbox's pid 1, the node fork server), once it has forked a few (struct rs_huge_text_plan). Included by
// forkserver.c and nodefork.c.
//
// Why: a forked execution starts with none of the executable's code mapped (fork copies no page-table
// entries for an unwritten file mapping), so each one faults the interpreter's code in again, and on a guest
// with shadow page tables the host then fills a shadow entry for every distinct page it touches, hundreds for
// a print(1). An anonymous copy on 2 MiB pages is copied by fork as one entry per 2 MiB, and the host maps it
// as such (sandbox/README.md has the figures).
//
// What moves: each 2 MiB of the executable that holds code and is all read-only file mapping (no hole, no
// writable part), made read+execute (a 2 MiB page has one permission): for Debian's python3.11 the ELF
// header, .text and the start of .rodata (4 MiB), for node 26 MiB, most of its .text. Each 2 MiB replaces
// its part of the file mapping in one mremap, so no instruction ever runs from a half-made copy; the bytes
// are the same. Nothing moves unless the copy is on huge pages (THP off, or no 2 MiB page free): an
// anonymous copy on 4 KiB pages would only cost memory.
//
// When: python's pid 1 moves its 4 MiB at once, before it forks the next warm interpreter (after the reply,
// off the request's path). The node fork server forks on request, so it moves 2 MiB after each fork, while
// that execution runs: all 26 MiB before one fork held that request up, and far longer when the sandboxes of a
// pool reached that fork together (the copy's first touch of fresh memory).
//
// The price: the moved code is this process's own memory instead of the page cache's, shared by every
// sandbox; and tools that name code by file (perf, /proc/PID/maps) see an anonymous mapping there. Hence
// only once a sandbox has served a few executions: an idle session, or a sandbox that serves one command,
// never holds a copy.
#ifndef RS_HUGE_TEXT_H
#define RS_HUGE_TEXT_H
#ifndef _GNU_SOURCE
#define _GNU_SOURCE  // mremap
#endif

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define RS_HUGE (2UL << 20)
#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25
#endif

// The executable's mappings, as /proc/self/maps lists them (in address order). Returns how many, or -1.
struct rs_exe_map {
  unsigned long lo, hi;
  int writable, executable;
};
static int rs_exe_maps(struct rs_exe_map *out, int max) {
  char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return -1;
  exe[n] = 0;
  FILE *f = fopen("/proc/self/maps", "re");
  if (!f) return -1;
  char line[4096 + 128];
  int count = 0;
  while (count < max && fgets(line, sizeof line, f)) {
    unsigned long a, b, off, ino;
    char perm[8], dev[16], path[4096];
    path[0] = 0;
    if (sscanf(line, "%lx-%lx %7s %lx %15s %lu %4095s", &a, &b, perm, &off, dev, &ino, path) < 6 || strcmp(path, exe) != 0) continue;
    out[count++] = (struct rs_exe_map){a, b, perm[1] == 'w', perm[2] == 'x'};
  }
  fclose(f);
  return count;
}

// Whether [p, p + 2 MiB) is all read-only mappings of the executable, without a hole, and holds some code.
static int rs_movable_huge_page(const struct rs_exe_map *m, int n, unsigned long p) {
  unsigned long at = p, end = p + RS_HUGE;
  int code = 0;
  for (int i = 0; i < n && at < end; i++) {
    if (m[i].hi <= at) continue;
    if (m[i].lo > at || m[i].writable) return 0;
    code |= m[i].executable;
    at = m[i].hi;
  }
  return at >= end && code;
}

// kB of AnonHugePages in the mapping that starts at addr (from /proc/self/smaps), or -1.
static long rs_anon_huge_kb(unsigned long addr) {
  FILE *f = fopen("/proc/self/smaps", "re");
  if (!f) return -1;
  char line[4096 + 128];
  int in = 0;
  long kb = -1;
  while (fgets(line, sizeof line, f)) {
    unsigned long a, b;
    if (sscanf(line, "%lx-%lx ", &a, &b) == 2) {  // a mapping's first line (field names are not hex-dash-hex)
      if (in) break;
      in = a == addr;
    } else if (in && sscanf(line, "AnonHugePages: %ld kB", &kb) == 1) {
      break;
    }
  }
  fclose(f);
  return kb;
}

// Whether the 2 MiB at `p` (filled) sit on one huge page. MADV_COLLAPSE (Linux 6.1+) answers at once for a
// huge page, and turns 4 KiB pages into one when it can (a fault finds no free 2 MiB page now and then);
// where the kernel lacks it, /proc/self/smaps tells (slow: ms for node's maps, hence not first).
static int rs_on_huge_page(char *p) {
  if (madvise(p, RS_HUGE, MADV_COLLAPSE) == 0) return 1;
  if (errno != EINVAL) return 0;
  return rs_anon_huge_kb((unsigned long)p) * 1024L >= (long)RS_HUGE;
}

// A run of the executable's code to move: [at, hi), and where its copy is made (2 MiB-aligned, reserved
// when planned, memory only as each 2 MiB is copied). The pieces of one copy, moved one at a time, stay one
// anonymous mapping at their destination (same origin, consecutive offsets), as the whole copy would.
struct rs_huge_run {
  unsigned long at, hi;
  char *copy;
};

// When and how to move: once `after` forks are made (-1: never), at most `per_step` 2 MiB at a time (0: all
// at once). `after_fork`: the step is called right after each fork (the one just made counts), not before.
struct rs_huge_text_plan {
  long after, forks;
  int per_step, after_fork;
  int n;  // runs planned and not all moved (0: not planned yet; once all moved or given up, after is -1)
  struct rs_huge_run run[16];
};

// A 2 MiB-aligned anonymous reservation of len bytes for huge pages, or NULL.
static char *rs_huge_reserve(size_t len) {
  char *raw = mmap(NULL, len + RS_HUGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return NULL;
  char *copy = (char *)(((unsigned long)raw + RS_HUGE - 1) & ~(RS_HUGE - 1));
  if (copy > raw) munmap(raw, (size_t)(copy - raw));
  if (copy + len < raw + len + RS_HUGE) munmap(copy + len, (size_t)(raw + len + RS_HUGE - (copy + len)));
  if (madvise(copy, len, MADV_HUGEPAGE) != 0) {  // EINVAL: a kernel without THP
    munmap(copy, len);
    return NULL;
  }
  return copy;
}

// Lists every run of 2 MiB pages of the executable that are read-only, without a hole, and hold code, and
// reserves each run's copy. Returns how many runs (0: nothing to move).
static int rs_huge_text_plan_runs(struct rs_huge_text_plan *plan) {
  struct rs_exe_map m[64];
  int n = rs_exe_maps(m, 64);
  plan->n = 0;
  if (n <= 0) return 0;
  // Each run of adjacent read-only mappings on its own: the executable may also be mapped far away (node
  // maps parts of itself again), and the gap between is no place to look for 2 MiB pages.
  for (int i = 0; i < n;) {
    int j = i;
    while (j + 1 < n && !m[j + 1].writable && m[j + 1].lo == m[j].hi) j++;
    unsigned long first = (m[i].lo + RS_HUGE - 1) & ~(RS_HUGE - 1), last = m[j].hi & ~(RS_HUGE - 1);
    for (unsigned long p = first; p < last && plan->n < (int)(sizeof plan->run / sizeof plan->run[0]);) {
      if (!rs_movable_huge_page(m, n, p)) {
        p += RS_HUGE;
        continue;
      }
      unsigned long q = p + RS_HUGE;
      while (q < last && rs_movable_huge_page(m, n, q)) q += RS_HUGE;
      char *copy = rs_huge_reserve(q - p);
      if (copy == NULL) return plan->n;
      plan->run[plan->n++] = (struct rs_huge_run){p, q, copy};
      p = q;
    }
    i = j + 1;
  }
  return plan->n;
}

// Moves the next 2 MiB of the plan: copies it into its run's reservation, and, if that landed on a huge
// page, makes it read+execute and puts it in place of the file mapping in one mremap, so no instruction
// ever runs from a half-made copy; the bytes are the same. Returns 1 (moved), 0 (nothing left), or -1 (the
// copy did not get a huge page, or a call failed: nothing more will move; what moved stays).
static int rs_huge_text_move_one(struct rs_huge_text_plan *plan) {
  int i = 0;
  while (i < plan->n && plan->run[i].at >= plan->run[i].hi) i++;
  if (i >= plan->n) return 0;
  struct rs_huge_run *r = &plan->run[i];
  char *piece = r->copy;
  memcpy(piece, (const void *)r->at, RS_HUGE);
  if (!rs_on_huge_page(piece) || mprotect(piece, RS_HUGE, PROT_READ | PROT_EXEC) != 0 ||
      mremap(piece, RS_HUGE, RS_HUGE, MREMAP_MAYMOVE | MREMAP_FIXED, (void *)r->at) == MAP_FAILED)
    return -1;
  r->at += RS_HUGE;
  r->copy += RS_HUGE;
  return 1;
}

// Gives back what is reserved and not moved.
static void rs_huge_text_drop(struct rs_huge_text_plan *plan) {
  for (int i = 0; i < plan->n; i++)
    if (plan->run[i].at < plan->run[i].hi) munmap(plan->run[i].copy, plan->run[i].hi - plan->run[i].at);
  plan->n = 0;
}

// Called once per fork of an execution (single-threaded, no program running in this process): once `after`
// forks are made, moves `per_step` 2 MiB of code (0: all of it). Nothing moved (no huge pages, an error)
// leaves the code where it was: nothing to undo.
static void rs_huge_text_step(struct rs_huge_text_plan *plan) {
  if (plan->after < 0 || plan->forks++ + plan->after_fork < plan->after) return;
  if (plan->n == 0 && rs_huge_text_plan_runs(plan) == 0) {
    plan->after = -1;
    return;
  }
  for (int moved = 0; plan->per_step == 0 || moved < plan->per_step; moved++) {
    int r = rs_huge_text_move_one(plan);
    if (r == 1) continue;
    rs_huge_text_drop(plan);
    plan->after = -1;
    return;
  }
}

#endif
