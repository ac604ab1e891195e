// Debian's chromium for the dashboard's browser tests (playwright-core never downloads a browser).
import { existsSync } from "node:fs";
import { type Browser, chromium } from "playwright-core";

export const CHROMIUM = process.env["ROLLSTREAM_CHROMIUM"] ?? "/usr/bin/chromium";

/** Launches chromium headless; where there is none, fails with one line that says how to get it. */
export async function launchChromium(args: string[]): Promise<Browser> {
  if (!existsSync(CHROMIUM)) {
    throw new Error(
      `no chromium at ${CHROMIUM}: the dashboard's browser tests drive Debian's chromium; install it (apt-get install chromium, as bash .ci/run does) or set ROLLSTREAM_CHROMIUM to one`,
    );
  }
  return chromium.launch({ executablePath: CHROMIUM, args });
}
