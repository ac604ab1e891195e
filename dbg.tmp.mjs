import { natsForRun } from "./dist/cli/run-nats.js";
import { connect } from "@nats-io/transport-node";
import { jetstream, jetstreamManager } from "@nats-io/jetstream";
import { StreamReader } from "./dist/streams/stream-reader.js";
const served = await natsForRun("runs/demo", undefined, undefined);
const nc = await connect({ servers: served.url });
const jsm = await jetstreamManager(nc);
const si = await jsm.streams.info("RS_DEMO_ROLLOUTS");
console.log("stream", si.state.first_seq, si.state.last_seq, si.state.messages);
const r = new StreamReader(jetstream(nc), { stream: "RS_DEMO_ROLLOUTS", subject: "rs.demo.rollouts.scored", fromSeq: 2561 });
for (let i = 0; i < 3; i++) { const t = Date.now(); const m = await r.next(5000); console.log("next", m?.seq, Date.now() - t, "ms"); }
await r.close(); await nc.close(); await served.stop();
