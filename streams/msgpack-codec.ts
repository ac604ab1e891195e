// Control messages are MessagePack validated with zod at the edge: a message either decodes into
// its full typed shape or is rejected with every problem listed, never half-applied.
import { decode, encode } from "@msgpack/msgpack";
import type { z } from "zod";

export class MessageValidationError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "MessageValidationError";
  }
}

/** The value as the schema outputs it, or MessageValidationError: what goes on the wire. */
export function validateForPublish<S extends z.ZodType>(schema: S, value: z.input<S>): z.output<S> {
  const parsed = schema.safeParse(value);
  if (!parsed.success) throw new MessageValidationError(`refusing to publish an invalid message: ${formatIssues(parsed.error)}`);
  return parsed.data;
}

/** Encodes a value validateForPublish returned (no second validation). */
export function encodeValidated(value: unknown): Uint8Array {
  return encode(value, { ignoreUndefined: true });
}

export function encodeMsgpack<S extends z.ZodType>(schema: S, value: z.input<S>): Uint8Array {
  return encodeValidated(validateForPublish(schema, value));
}

export function decodeMsgpack<S extends z.ZodType>(schema: S, data: Uint8Array, what = "message"): z.output<S> {
  let raw: unknown;
  try {
    raw = decode(data);
  } catch (e) {
    throw new MessageValidationError(`${what}: not valid MessagePack (${(e as Error).message})`);
  }
  const parsed = schema.safeParse(raw);
  if (!parsed.success) throw new MessageValidationError(`${what}: ${formatIssues(parsed.error)}`);
  return parsed.data;
}

export function formatIssues(err: z.ZodError): string {
  return err.issues.map((i) => `${i.path.length ? i.path.join(".") : "(root)"}: ${i.message}`).join("; ");
}
