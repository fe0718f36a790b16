"""config.py, the `connectors:` section: defaults, every connector's settings, and one clear error per mistake."""

from __future__ import annotations

import pytest

from attribution.config import ConnectorSettings, load_settings, parse_settings
from attribution.errors import ConfigError


def test_without_a_connectors_section_nothing_is_queried():
    c = parse_settings({}, "x").connectors
    assert c == ConnectorSettings()
    assert c.loki.url is None and c.prometheus.url is None and c.files == ()
    assert c.kubernetes.pod_selectors["PyTorchJob"] == "training.kubeflow.org/job-name=$name"


def test_a_full_section(tmp_path):
    p = tmp_path / "config.yaml"
    p.write_text("""
cluster: helios
connectors:
  loki:
    url: https://loki.example:3100
    tenant: gpu-fleet
    token_file: /etc/attribution/loki.token
    limit: 1000
    direction: backward
    node_label: hostname
    sources: [kernel, job]
    selectors: {kernel: '{hostname="$node", unit="kernel"}'}
  prometheus:
    url: http://prometheus:9090
    step: 30
    labels: {node: instance_hostname}
    matchers: 'job="dcgm-exporter"'
    timeout: 5
    budget: 20
  kubernetes:
    kubectl: /usr/local/bin/kubectl
    context: prod
    pod_selectors: {MyJob: 'example.com/job=$name'}
  slurm: {sacct: /opt/slurm/bin/sacct, timeout: 60}
  files:
    - /var/log/cluster/$node/kern.log*
    - {path: '/scratch/jobs/$job_id/*.out', source: job}
""")
    s = load_settings(p)
    c = s.connectors
    assert (c.loki.url, c.loki.tenant, c.loki.limit, c.loki.direction) == ("https://loki.example:3100", "gpu-fleet",
                                                                           1000, "backward")
    assert c.loki.sources == ("kernel", "job") and c.loki.node_label == "hostname"
    assert c.prometheus.labels == {"node": "instance_hostname"} and c.prometheus.step == 30
    assert c.kubernetes.pod_selectors["MyJob"] == "example.com/job=$name"
    assert c.kubernetes.pod_selectors["Job"] == "batch.kubernetes.io/job-name=$name"  # defaults kept
    assert c.slurm.sacct == "/opt/slurm/bin/sacct" and c.slurm.scontrol == "scontrol"
    assert [(f.source, f.path) for f in c.files] == [("node", "/var/log/cluster/$node/kern.log*"),
                                                     ("job", "/scratch/jobs/$job_id/*.out")]


@pytest.mark.parametrize("section,message", [
    ({"loki": {"url": "x", "colour": "red"}}, "unknown setting(s) in 'connectors.loki': colour"),
    ({"loki": {"direction": "sideways"}}, "direction must be forward or backward"),
    ({"loki": {"sources": ["kernel", "dmesg"]}}, "unknown source(s) dmesg"),
    ({"loki": {"limit": 0}}, "limit must be a positive whole number"),
    ({"prometheus": {"timeout": -1}}, "connectors.prometheus.timeout must be a positive"),
    ({"prometheus": {"step": "fast"}}, "step must be a positive"),
    ({"files": [{"path": "/x", "source": "dmesg"}]}, "source must be one of"),
    ({"files": "/x"}, "must be a list"),
    ({"grafana": {}}, "unknown setting(s) in 'connectors': grafana"),
])
def test_mistakes_are_named(section, message):
    with pytest.raises(ConfigError) as exc:
        parse_settings({"connectors": section}, "cfg.yaml")
    assert message in str(exc.value) and str(exc.value).startswith("cfg.yaml")
