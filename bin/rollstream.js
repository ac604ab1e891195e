#!/usr/bin/env node
// Entry point of the `rollstream` command: the CLI is compiled TypeScript under dist/.
import { existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const main = join(root, "dist", "cli", "main.js");
if (!existsSync(main)) {
  // A clone builds dist/ itself (npm ci runs the prepare step); an installed tarball ships it, so a tarball without
  // it was packed wrongly, and nothing run here (where no TypeScript compiler is installed) can mend it.
  process.stderr.write(
    existsSync(join(root, "tsconfig.json"))
      ? `rollstream is not built yet: run \`npm ci\` (or \`npm run build\`) in ${root}\n`
      : `rollstream: this installed package has no compiled code (${main} is missing): it was packed without dist/; ` +
          "make the tarball with `npm pack` in a clone where `npm ci` ran (its prepack step builds what the tarball needs), then install that\n",
  );
  process.exit(1);
}
await import(main);
