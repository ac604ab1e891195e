// Injection tokens. Every injected constructor parameter names its token with @inject(token):
// neither our TypeScript pin nor tsx emit reliable parameter-type metadata, so we never rely on it.
export const Tokens = {
  Context: Symbol("ActorContext"),
  Config: Symbol("RunConfig"),
  Logger: Symbol("Logger"),
  Nats: Symbol("NatsConnection"),
  Metrics: Symbol("ActorMetrics"),
} as const;
