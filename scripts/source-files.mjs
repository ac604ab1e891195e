// The TypeScript sources below a folder, for the checks in scripts/ that read the tree.
import { readdirSync, statSync } from "node:fs";
import { join } from "node:path";

export function sourcesUnder(dir, out = []) {
  for (const name of readdirSync(dir)) {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) sourcesUnder(p, out);
    else if (name.endsWith(".ts") && !name.endsWith(".d.ts")) out.push(p);
  }
  return out;
}
