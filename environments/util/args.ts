import type { z } from "zod";

/** Validates an environment's args with its zod schema; the error names the env and every bad field. */
export function parseEnvArgs<S extends z.ZodType>(envName: string, schema: S, args: unknown): z.output<S> {
  const r = schema.safeParse(args ?? {});
  if (!r.success) {
    const why = r.error.issues.map((i) => `${i.path.join(".") || "args"}: ${i.message}`).join("; ");
    throw new Error(`environment ${envName}: invalid args: ${why}`);
  }
  return r.data;
}
