# rollstream in a container: the image deploy/k8s runs every actor from, and a self-contained
# `rollstream train` (it starts its own nats-server). Debian with Node 20, nats-server, bubblewrap and
# python3 for the sandbox, OpenBLAS; the project built (native kernels and TypeScript).
#   docker build -t rollstream .
#   docker run --rm rollstream train examples/demo.yaml          (the sandbox actor needs --privileged)
FROM node:20-bookworm-slim
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      nats-server bubblewrap python3 libopenblas0-pthread g++ make ca-certificates \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /opt/rollstream
COPY . .
# npm ci compiles the native kernels (install) and the TypeScript (prepare); dev tools go afterwards.
RUN npm ci --no-audit --no-fund && npm prune --omit=dev --no-audit --no-fund
ENV NODE_ENV=production
ENTRYPOINT ["node", "/opt/rollstream/bin/rollstream.js"]
CMD ["--help"]
