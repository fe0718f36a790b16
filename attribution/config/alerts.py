"""The `alerts:` section of the configuration file, as frozen pydantic models (unknown keys refused).

```yaml
alerts:
  cooldown_seconds: 3600            # one alert per key (node, outcome, kind) in this time, however many jobs
  dashboard_url: https://attribution.example/ui   # links in the messages (optional)
  sinks:
    - {type: webhook, url: https://hooks.example/attribution}
    - {type: slack, url_file: /etc/attribution/slack-webhook}       # the URL is a secret: read from a file
    - {type: alertmanager, url: http://alertmanager:9093, events: [verdict]}
```
"""

from __future__ import annotations

from typing import Literal, Optional, Tuple

from pydantic import BaseModel, ConfigDict, Field, model_validator

INFRASTRUCTURE = ("gpu_hardware", "nvlink", "nvswitch_fabric", "network", "host")


class SinkSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    type: Literal["webhook", "slack", "alertmanager"]
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


class AlertSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    sinks: Tuple[SinkSettings, ...] = ()
    cooldown_seconds: int = Field(3600, ge=0)
    max_per_run: int = Field(200, ge=1)
    dashboard_url: Optional[str] = None


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
