"""config.load: a configuration file's every problem as one line `file:line: setting problem`, the line being the
offending key's; the command line exits 2 with that line and no traceback."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from attribution.cli import main
from attribution.config import load_settings
from attribution.errors import ConfigError

FILE = """\
cluster: helios
database:
  url: postgresql://db/attribution
  connect_timeout: 3
epilog:
  budget_seconds: 12
  job_output_bytes: {job_output_bytes}
service:
  listen: 0.0.0.0:9000
  {service_key}: 4
connectors:
  loki:
    url: http://loki:3100
    sources: [kernel, job]
  files:
    - /var/log/$node/kern.log
    - {{path: /scratch/$job_id.out, source: {file_source}}}
"""


def write(tmp_path, **values):
    p = tmp_path / "config.yaml"
    p.write_text(FILE.format(**{"job_output_bytes": 1024, "service_key": "workers", "file_source": "job", **values}))
    return p


def problem(path) -> str:
    with pytest.raises(ConfigError) as exc:
        load_settings(path)
    return str(exc.value)


def test_a_valid_file_loads_every_section(tmp_path):
    s = load_settings(write(tmp_path))
    assert (s.cluster, s.database.connect_timeout, s.epilog.budget_seconds, s.epilog.job_output_bytes) == \
        ("helios", 3, 12, 1024)
    assert s.service.host_port() == ("0.0.0.0", 9000) and s.service.workers == 4
    assert s.connectors.loki.sources == ("kernel", "job") and s.source == str(tmp_path / "config.yaml")
    assert [(f.path, f.source) for f in s.connectors.files] == [("/var/log/$node/kern.log", "node"),
                                                                ("/scratch/$job_id.out", "job")]


def test_a_wrong_type_names_the_line_of_its_key(tmp_path):
    p = write(tmp_path, job_output_bytes='"16M"')
    assert problem(p) == f"{p}:7: epilog.job_output_bytes must be a positive whole number, got '16M'"


def test_an_unknown_key_names_its_own_line(tmp_path):
    p = write(tmp_path, service_key="wrokers")
    assert problem(p) == f"{p}:10: unknown setting(s) in 'service': wrokers"


def test_a_bad_value_in_a_list_names_the_line_of_the_item(tmp_path):
    p = write(tmp_path, file_source="dmesg")
    assert problem(p) == (f"{p}:17: connectors.files[1].source must be one of kernel, fabricmanager, node, job")


def test_every_problem_is_a_line_of_its_own(tmp_path):
    p = write(tmp_path, job_output_bytes="0", service_key="colour")
    with pytest.raises(ConfigError) as exc:
        load_settings(p)
    assert [str(x) for x in exc.value.problems] == [
        f"{p}:7: epilog.job_output_bytes must be a positive whole number, got 0",
        f"{p}:10: unknown setting(s) in 'service': colour"]


def test_a_true_is_not_a_number_and_a_section_must_be_a_mapping(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("home: /srv/attribution\n\nservice:\n  max_events: true\n")
    assert problem(p) == f"{p}:4: service.max_events must be a positive whole number, got True"
    p.write_text("epilog: 5\n")
    assert problem(p) == f"{p}:1: epilog must be a mapping"


def test_empty_sections_and_null_keys_are_the_defaults(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("database:\nconnectors:\n  loki:\nhome: ''\ncluster: 7\n")
    s = load_settings(p)
    assert s.database.url is None and s.connectors.loki.url is None and s.cluster == "7"


def test_the_command_line_exits_2_with_the_one_line(tmp_path):
    p = write(tmp_path, service_key="wrokers")
    r = CliRunner().invoke(main, ["--config", str(p), "db", "status"])
    assert r.exit_code == 2, r.output
    assert r.output == f"attribution: {p}:10: unknown setting(s) in 'service': wrokers\n"
    assert isinstance(r.exception, SystemExit)  # an exit code, not an exception escaping with its traceback


def test_malformed_yaml_names_its_line(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("database:\n  url: [unclosed\n")
    assert problem(p).startswith(f"{p}:3: malformed YAML")
