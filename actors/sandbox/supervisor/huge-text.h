// Moves an interpreter's code onto transparent huge pages, in the process that forks every execution (a
// sandbox's pid 1, the node fork server), once it has forked a few (struct rs_huge_text_plan). Included by
// forkserver.c and nodefork.c.
//
// Why: a forked execution starts with none of the executable's code mapped (fork copies no page-table
// entries for an unwritten file mapping), so each one faults the interpreter's code in again, 16 pages a
// fault, and on a guest with shadow page tables (a PVM day) the host then fills a shadow entry for every
// distinct page it touches: ~4 us a page, for the ~450 code pages a print(1) runs through. An anonymous copy
// on 2 MiB pages is copied by fork as one entry per 2 MiB, and the host maps it as such.
//
// What moves: each 2 MiB of the executable that holds code and is all read-only file mapping (no hole, no
// writable part), made read+execute (a 2 MiB page has one permission): for Debian's python3.11 the ELF
// header, .text and the start of .rodata (4 MiB), for node 26 MiB, most of its .text. The copy replaces
// the file mapping in one mremap, so no instruction ever runs from a half-made copy; the bytes are the same.
// Nothing moves unless the copy is on huge pages (THP off, or no 2 MiB page free): an anonymous copy on
// 4 KiB pages would only cost memory.
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

// Moves [start, start + len) (2 MiB-aligned) onto a huge-page copy. Returns len, 0 when the copy did not get
// huge pages, or -errno (nothing moved either way).
static long rs_move_onto_huge_pages(unsigned long start, size_t len) {
  // A 2 MiB-aligned place for the copy: over-allocate, then trim both ends.
  char *raw = mmap(NULL, len + RS_HUGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return -errno;
  char *copy = (char *)(((unsigned long)raw + RS_HUGE - 1) & ~(RS_HUGE - 1));
  if (copy > raw) munmap(raw, (size_t)(copy - raw));
  if (copy + len < raw + len + RS_HUGE) munmap(copy + len, (size_t)(raw + len + RS_HUGE - (copy + len)));
  long r = 0;
  if (madvise(copy, len, MADV_HUGEPAGE) != 0) {
    r = errno == EINVAL ? 0 : -errno;  // EINVAL: a kernel without THP
    goto drop;
  }
  memcpy(copy, (const void *)start, len);
  if (rs_anon_huge_kb((unsigned long)copy) * 1024L < (long)len) {
    // Filled with 4 KiB pages (no 2 MiB page was free at the fault): ask once for a collapse (Linux 6.1+).
    madvise(copy, len, MADV_COLLAPSE);
    if (rs_anon_huge_kb((unsigned long)copy) * 1024L < (long)len) goto drop;
  }
  if (mprotect(copy, len, PROT_READ | PROT_EXEC) != 0) {
    r = -errno;
    goto drop;
  }
  if (mremap(copy, len, len, MREMAP_MAYMOVE | MREMAP_FIXED, (void *)start) == MAP_FAILED) {
    r = -errno;
    goto drop;
  }
  return (long)len;
drop:
  munmap(copy, len);
  return r;
}

// Moves every 2 MiB of the executable that is read-only, without a hole, and holds code (each run of them
// one copy). Returns the bytes now on huge pages (0: none), or -errno from the first failed move (the
// runs before it stay moved).
static long rs_huge_text(void) {
  struct rs_exe_map m[64];
  int n = rs_exe_maps(m, 64);
  if (n <= 0) return -ENOENT;
  long moved = 0;
  // Each run of adjacent read-only mappings on its own: the executable may also be mapped far away (node
  // maps parts of itself again), and the gap between is no place to look for 2 MiB pages.
  for (int i = 0; i < n;) {
    int j = i;
    while (j + 1 < n && !m[j + 1].writable && m[j + 1].lo == m[j].hi) j++;
    unsigned long first = (m[i].lo + RS_HUGE - 1) & ~(RS_HUGE - 1), last = m[j].hi & ~(RS_HUGE - 1);
    for (unsigned long p = first; p < last;) {
      if (!rs_movable_huge_page(m, n, p)) {
        p += RS_HUGE;
        continue;
      }
      unsigned long q = p + RS_HUGE;
      while (q < last && rs_movable_huge_page(m, n, q)) q += RS_HUGE;
      long r = rs_move_onto_huge_pages(p, q - p);
      if (r < 0) return moved ? moved : r;
      moved += r;
      p = q;
    }
    i = j + 1;
  }
  return moved;
}

// When to move: before the fork that follows `after` forks (-1: never).
struct rs_huge_text_plan {
  long after, forks;
};

// Called before each fork of an execution (single-threaded, no program running in this process).
static void rs_huge_text_before_fork(struct rs_huge_text_plan *plan) {
  if (plan->after < 0 || plan->forks++ < plan->after) return;
  rs_huge_text();  // nothing moved (no huge pages, an error) leaves the code where it was: nothing to undo
  plan->after = -1;
}

#endif
