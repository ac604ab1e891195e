// Worker thread entry: mathjs checks run here so that a pathological answer can be killed at its time limit.
import { serveWorker } from "../util/timed-worker.js";
import { mathEqual, type Equivalence } from "./equivalence.js";

serveWorker<{ gold: string; pred: string }, Equivalence>(({ gold, pred }) => mathEqual(gold, pred));
