"""`attribution watch kueue` from the command line (against the fake Kubernetes API), its usage mistakes, and the
`watch.kueue.serve` setting that makes `attribution serve` run it beside the service."""

from __future__ import annotations


import yaml
from click.testing import CliRunner

from attribution.cli import main
from attribution.cli.serve import _kueue_watcher
from attribution.config import KueueWatchSettings, Settings, WatchSettings

from tests.harness import kueueday as day
from tests.harness.kubeapi import FakeKubeApi


def test_watch_kueue_stores_the_runs_it_sees_and_says_how_many(store, tmp_path):
    with FakeKubeApi() as api:
        day.initial(api)
        api.timeline = [day.step_clean_and_tokenizer]
        cfg = tmp_path / "config.yaml"
        cfg.write_text(yaml.safe_dump({"cluster": "helios", "connectors": {"kubernetes": {"api_server": api.url}},
                                       "watch": {"kueue": {"watch_seconds": 5}}}))
        env = {"ATTRIBUTION_DATABASE_URL": store.url.render_as_string(hide_password=False),
               "ATTRIBUTION_HOME": str(tmp_path / "home")}
        r = CliRunner().invoke(main, ["--config", str(cfg), "watch", "kueue", "--max-watches", "2"], env=env)
    assert r.exit_code == 0, r.output
    assert "stored 1 run(s): 1 application; 1 list(s), 2 watch(es), 0 expired" in r.output


def test_without_a_cluster_name_it_is_exit_2_with_one_line(tmp_path):
    r = CliRunner().invoke(main, ["watch", "kueue", "--api-server", "http://127.0.0.1:9"],
                           env={"ATTRIBUTION_HOME": str(tmp_path)})
    assert r.exit_code == 2 and "no cluster name" in r.output


def test_serve_runs_the_watcher_in_one_process_and_stops_it_with_itself(store, tmp_path, monkeypatch):
    off = Settings()
    with _kueue_watcher(off) as proc:
        assert proc is None
    with FakeKubeApi() as api:
        cfg = tmp_path / "config.yaml"
        cfg.write_text(yaml.safe_dump({"cluster": "helios", "connectors": {"kubernetes": {"api_server": api.url}}}))
        monkeypatch.setenv("ATTRIBUTION_CONFIG", str(cfg))
        monkeypatch.setenv("ATTRIBUTION_DATABASE_URL", store.url.render_as_string(hide_password=False))
        monkeypatch.setenv("ATTRIBUTION_HOME", str(tmp_path / "home"))
        on = Settings(watch=WatchSettings(kueue=KueueWatchSettings(serve=True)))
        with _kueue_watcher(on) as proc:
            assert proc.args[-2:] == ["watch", "kueue"]
        assert proc.returncode is not None  # stopped when the service stops
