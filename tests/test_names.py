"""attribution.names: the one rule for cluster and node names and for job ids, and every intake applying it: a
bundle's context.yaml (scope.bundle), the service's bodies and path parameters (api.schemas)."""

from __future__ import annotations

import pytest
from pydantic import TypeAdapter, ValidationError

from attribution import names
from attribution.api.schemas import ClusterName, ContextDoc, JobId, JobIdPath, NodeName, NodePath
from attribution.errors import InputError
from attribution.model import ExecutionContext
from attribution.scope.bundle import check_storable, context_from_mapping, parse_context

#: Names real systems have, kept as they are: Slurm node and cluster names, a Kubernetes node, names with
#: characters a URL path gives a meaning to, letters of other scripts, the hostile names of
#: tests/hardening/test_injection.py.
GOOD = ["gpu017", "dgx-a100-03.ib.example.org", "node_7:2", "gpu#2?x%41", "gpu%2F41", "lab#east", "nœud-é-节点-😀",
        "a;b|c$(id)&d", "n'1\"q`x`", "c';DROP(TABLE)attribution.jobs;--", "x" * names.MAX_NAME]
#: Not names: empty, too long, whitespace, control and format characters, a folder separator or a dot folder,
#: hostlist syntax, text PostgreSQL cannot store.
BAD = ["", "x" * (names.MAX_NAME + 1), "gpu 01", "gpu\t01", "gpu01\n", "gpu\x0701", "gpu\u200b01", "gpu\u202e01",
       "rack/n5", "..", "gpu[01-04]", "gpu01,gpu02", "a\x00b", "a\ud800b"]


@pytest.mark.parametrize("name", GOOD)
def test_a_real_name_is_a_name_everywhere(name):
    assert names.system_name_problem(name) is None
    assert TypeAdapter(NodeName).validate_python(name) == name
    assert TypeAdapter(ClusterName).validate_python(name) == name
    check_storable(ExecutionContext(cluster=name, job_id="1", nodes=(name,)))


@pytest.mark.parametrize("name", BAD)
def test_what_is_no_name_is_refused_at_every_intake(name):
    assert names.system_name_problem(name) is not None
    with pytest.raises(ValidationError):
        TypeAdapter(NodeName).validate_python(name)
    if not name:
        return  # an empty cluster or node is a missing one (a required field, or an event of the whole job)
    with pytest.raises(InputError, match="node"):
        check_storable(ExecutionContext(cluster="c1", job_id="1", nodes=("gpu1",)), nodes=[name])
    with pytest.raises(InputError, match="cluster"):  # context.yaml, the API's context, a connector's
        context_from_mapping({"cluster": name, "job_id": "1", "nodes": ["gpu1"]}, "context")


def test_a_job_id_is_text_a_slash_included():
    assert TypeAdapter(JobId).validate_python("team/train-3") == "team/train-3"  # a Kueue workload
    assert TypeAdapter(JobId).validate_python("1234_7 +x") == "1234_7 +x"
    for bad in ("", "a\x00b", "y" * 256):
        with pytest.raises(ValidationError):
            TypeAdapter(JobId).validate_python(bad)
        assert names.text_problem(bad)


def test_the_service_body_the_observation_codec_and_the_context_file_agree():
    """The same names refused by all three (a slash, a space: context.yaml stored them, the API refused them with
    its own pattern, the codec with its own rule) and accepted by all three (quotes, `#`, `?`: the API's pattern
    refused them)."""
    from attribution.intake.codec import _name

    for bad in ("rack/7-gpu01", "rack7 gpu01", "gpu[1-2]"):
        with pytest.raises(ValidationError, match="failed_node"):
            ContextDoc.model_validate({"cluster": "c1", "job_id": "7", "nodes": ["n1"], "failed_node": bad})
        with pytest.raises(InputError, match="failed_node"):
            parse_context(f'cluster: c1\njob_id: 7\nnodes: [n1]\nfailed_node: "{bad}"\n')
        with pytest.raises(InputError, match="not a node or cluster name"):
            _name(bad, "reporter.name")
    for good in ("rack7#gpu01", "n'1?x"):
        assert ContextDoc.model_validate({"cluster": "c1", "job_id": "ns/7", "nodes": [good]}).nodes == [good]
        assert parse_context(f'cluster: c1\njob_id: ns/7\nnodes: ["{good}"]\n').nodes == (good,)
        assert _name(good, "reporter.name") == good


def test_a_path_parameter_gives_back_the_slash_the_url_held_as_percent_2f():
    from attribution.api.segments import SLASH

    assert TypeAdapter(JobIdPath).validate_python(f"team{SLASH}train-3") == "team/train-3"
    with pytest.raises(ValidationError):  # a node name has no slash, encoded or not
        TypeAdapter(NodePath).validate_python(f"rack{SLASH}7")
