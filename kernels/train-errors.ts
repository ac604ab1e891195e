// Which failures of a training step its input caused. The learner sets the batches that cause them aside
// and trains on the rest; any other failure (out of memory, a device error, a bug) is not the data's
// fault and must stop the step instead of costing the run good samples.

/** rs_status RS_ERR_INVALID_ARGUMENT (kernels.h): the backend refused its input. */
const RS_ERR_INVALID_ARGUMENT = 1;

/** A step whose loss or gradient is not finite: applied, it would poison every weight and moment. */
export class NonFiniteStepError extends Error {
  override readonly name = "NonFiniteStepError";
}

export function isInputCaused(e: unknown): boolean {
  if (!(e instanceof Error)) return false;
  if (e instanceof NonFiniteStepError) return true;
  const status = (e as { rsStatus?: unknown }).rsStatus;
  if (typeof status === "number") return status === RS_ERR_INVALID_ARGUMENT;
  // PolicyModel checks its arguments before any native call and throws these for bad values.
  return e instanceof RangeError || e instanceof TypeError;
}
