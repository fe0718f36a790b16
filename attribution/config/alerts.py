"""The `alerts:` section of the configuration file, as frozen pydantic models (unknown keys refused).

```yaml
alerts:
  cooldown_seconds: 3600            # one alert per key (node, outcome, kind) in this time, however many jobs
  dashboard_url: https://attribution.example/ui   # links in the messages (optional)
  attempts: 10                      # a sink that fails is tried again, this many times in all per alert,
  retry_seconds: 60                 # after 60 s, then twice as long each time,
  retry_max_seconds: 3600           # never more than an hour apart
  sinks:
    - {type: webhook, url: https://hooks.example/attribution}
    - {type: slack, url_file: /etc/attribution/slack-webhook}       # the URL is a secret: read from a file
    - {type: alertmanager, url: http://alertmanager:9093, events: [verdict]}
```
A sink is known to the store by its `name` (its type unless given): the deliveries an alert still owes a sink are
kept under that name, so two sinks of one type need names, and a renamed sink starts afresh.
"""

from __future__ import annotations

from typing import Literal, Optional, Tuple

from pydantic import BaseModel, ConfigDict, Field, model_validator

INFRASTRUCTURE = ("gpu_hardware", "nvlink", "nvswitch_fabric", "network", "host")


class SinkSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    type: Literal["webhook", "slack", "alertmanager"]
    name: Optional[str] = Field(None, min_length=1, max_length=100, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    url: Optional[str] = None
    url_file: Optional[str] = None  # a Slack webhook URL is a credential: keep it in an owner-only file
    token_file: Optional[str] = None  # webhook: a bearer token, from an owner-only file
    timeout_seconds: float = Field(5.0, gt=0, le=60)
    events: Tuple[Literal["verdict", "drain"], ...] = ("verdict", "drain")
    outcomes: Tuple[str, ...] = INFRASTRUCTURE

    @model_validator(mode="after")
    def _one_url(self):
        if (self.url is None) == (self.url_file is None):
            raise ValueError("give exactly one of url and url_file")
        return self

    @property
    def id(self) -> str:
        """The sink's name in the store (its deliveries): `name`, else its type."""
        return self.name or self.type

    def where(self) -> str:
        """Where the sink is, as a message may say it: the URL's origin, or the file the URL is kept in."""
        from attribution.secrets import origin

        return f"url_file {self.url_file}" if self.url_file else origin(self.url or "")


class AlertSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    sinks: Tuple[SinkSettings, ...] = ()
    cooldown_seconds: int = Field(3600, ge=0)
    max_per_run: int = Field(200, ge=1)
    dashboard_url: Optional[str] = None
    attempts: int = Field(10, ge=1, le=100)  # deliveries of one alert to one sink, the first one included
    retry_seconds: float = Field(60.0, ge=0)  # the wait after the first failure; doubled after each one
    retry_max_seconds: float = Field(3600.0, ge=0)

    @model_validator(mode="after")
    def _unique_names(self):
        ids = [s.id for s in self.sinks]
        twice = sorted({i for i in ids if ids.count(i) > 1})
        if twice:
            raise ValueError(f"two sinks are named {', '.join(twice)}: give each a name")
        return self


def parse_alerts(data, origin: str) -> AlertSettings:
    """The section's values, or ConfigError naming the file and each problem (a whole configuration file is
    read by attribution.config, which gives each problem its line)."""
    from pydantic import ValidationError

    from attribution.config.load import problems_of
    from attribution.errors import ConfigError

    try:
        return AlertSettings.model_validate(data or {})
    except ValidationError as exc:
        problems = problems_of(exc, origin, prefix=("alerts",))
        raise ConfigError("\n".join(map(str, problems)), problems) from None
