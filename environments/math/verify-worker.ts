// Worker thread entry: mathjs checks run here so that a pathological answer can be killed at its time limit.
// A worker entry loads only what it runs (not the whole public API): it restarts after every timeout.
import { serveWorker } from "../util/timed-worker.js";
import { mathEqual, type Equivalence } from "./equivalence.js";

serveWorker<{ gold: string; pred: string }, Equivalence>(({ gold, pred }) => mathEqual(gold, pred));
