#!/usr/bin/env node
// Entry point of the `rollstream` command: the CLI is compiled TypeScript under dist/.
import { existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const main = join(root, "dist", "cli", "main.js");
if (!existsSync(main)) {
  process.stderr.write("rollstream is not built yet: run `npm run build` (or `npm ci`) in " + root + "\n");
  process.exit(1);
}
await import(main);
