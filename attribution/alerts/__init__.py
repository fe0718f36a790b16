"""alerts: each new infrastructure verdict and each drain decision, sent to the configured sinks (a JSON webhook,
Slack, Alertmanager) once per key and cooldown, by `attribution alerts send` (run from a timer)."""
