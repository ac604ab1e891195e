// The programs that run INSIDE every sandbox live as real source files in supervisor/ (so they can be
// linted and syntax-checked); isolation.ts writes them to a root-owned runtime folder at service start,
// bind-mounted read-only at /.rs, so the sandboxed code can read but never change them.
//   supervisor/supervisor.py  pid 1 of the sandbox (see its header for the control protocol)
//   supervisor/boot.cjs       node's warm-start entry, mounted as /.rs/boot.js
//   supervisor/build/forkserver.so  the supervisor's per-execution loop in C (forkserver.c)
//   supervisor/build/nodefork.node  the node fork server's addon (nodefork.c)
// tsc copies no non-TS files into dist/ or dist-*/, so they are read from the source tree, found by
// walking up from this file to the package root (as kernels/native.ts finds kernels/build).
import { existsSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const REL = join("sandbox", "supervisor");

/** sandbox/supervisor/ of the package this file belongs to (works from source, dist/ and dist-*). */
export function supervisorDir(): string {
  const here = fileURLToPath(import.meta.url);
  for (let dir = dirname(here); ; ) {
    if (existsSync(join(dir, "package.json")) && existsSync(join(dir, REL, "supervisor.py"))) return join(dir, REL);
    const up = dirname(dir);
    if (up === dir) throw new Error(`sandbox: cannot find ${REL}/supervisor.py in any package root above ${here}`);
    dir = up;
  }
}

const DIR = supervisorDir();
export const SUPERVISOR_PY = readFileSync(join(DIR, "supervisor.py"), "utf8");
export const NODE_BOOT_JS = readFileSync(join(DIR, "boot.cjs"), "utf8");

/** The node fork server's addon (supervisor/build.sh, run by npm ci); throws, naming the fix, when it was not built. */
export function nodeForkLibrary(): string {
  const path = join(DIR, "build", "nodefork.node");
  if (!existsSync(path))
    throw new Error(
      `sandbox: ${path} is not built; run \`npm ci\` (or \`bash sandbox/supervisor/build.sh\`), which needs node's headers, or serve no node (sandbox.runtimes.node.enabled: false)`,
    );
  return path;
}

/** The C per-execution loop (supervisor/build.sh, run by npm ci); throws, naming the fix, when it was not built. */
export function forkLoopLibrary(): string {
  const path = join(DIR, "build", "forkserver.so");
  if (!existsSync(path)) throw new Error(`sandbox: ${path} is not built; run \`npm ci\` (or \`bash sandbox/supervisor/build.sh\`), which needs a C compiler`);
  return path;
}
