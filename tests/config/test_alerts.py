"""config/alerts.py: the `alerts:` section, every problem with the file named; each sink's name in the store."""

from __future__ import annotations

import pytest

from attribution.config.alerts import SinkSettings, parse_alerts
from attribution.errors import ConfigError


def test_the_alerts_section_is_checked_with_the_file_named():
    with pytest.raises(ConfigError, match=r"conf.yaml: alerts.sinks\[0\]: give exactly one of url"):
        parse_alerts({"sinks": [{"type": "webhook"}]}, "conf.yaml")
    with pytest.raises(ConfigError, match=r"conf.yaml: alerts.sinks\[0\].type"):
        parse_alerts({"sinks": [{"type": "pager", "url": "http://x"}]}, "conf.yaml")
    with pytest.raises(ConfigError, match=r"conf.yaml: unknown setting\(s\) in 'alerts': colldown"):
        parse_alerts({"colldown": 5}, "conf.yaml")


def test_sinks_of_one_type_need_names():
    with pytest.raises(ConfigError, match="two sinks are named webhook: give each a name"):
        parse_alerts({"sinks": [{"type": "webhook", "url": "http://a"}, {"type": "webhook", "url": "http://b"}]},
                     "conf.yaml")
    s = parse_alerts({"sinks": [{"type": "webhook", "url": "http://a"},
                                {"type": "webhook", "name": "ops", "url": "http://b"}]}, "conf.yaml")
    assert [x.id for x in s.sinks] == ["webhook", "ops"]


def test_a_sink_says_where_it_is_without_its_credentials():
    assert SinkSettings(type="slack", url_file="/etc/attribution/slack").where() == "url_file /etc/attribution/slack"
    assert SinkSettings(type="webhook", url="https://u:pw@hooks.example:8443/x/y?t=1").where() == \
        "https://hooks.example:8443"
