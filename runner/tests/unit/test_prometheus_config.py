"""prometheus/: the config as compose uses it, and as the native runner renders it."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from ktor_lab.parts import prometheus as prom
from ktor_lab.paths import REPO


def test_config_scrapes_the_three_parts_often_enough_for_a_30s_run():
    config = yaml.safe_load((REPO / "prometheus" / "prometheus.yml").read_text())
    assert config["global"]["scrape_interval"] in ("1s", "2s", "5s")
    targets = {j["job_name"]: j["static_configs"][0]["targets"] for j in config["scrape_configs"]}
    assert targets == {"proxy": ["proxy:8080"], "locust": ["locust:8089"], "nginx": ["nginx-exporter:9113"]}


def test_write_config_moves_targets_and_refuses_unknown_jobs(tmp_path):
    conf = yaml.safe_load(prom.write_config(tmp_path, {"proxy": "127.0.0.1:1"}, "1s").read_text())
    assert [j["job_name"] for j in conf["scrape_configs"]] == ["proxy"]
    assert conf["scrape_configs"][0]["static_configs"] == [{"targets": ["127.0.0.1:1"]}]
    assert conf["global"]["scrape_interval"] == "1s"
    with pytest.raises(ValueError, match="no such job"):
        prom.write_config(tmp_path, {"grafana": "127.0.0.1:1"})


def test_a_discovery_file_is_found_from_the_configs_folder_as_prometheus_reads_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run = Path("results") / "x" / "logs"
    targets = run / "proxy-targets.json"
    conf = prom.write_config(run, {}, files={"proxy": targets})
    [path] = yaml.safe_load(conf.read_text())["scrape_configs"][0]["file_sd_configs"][0]["files"]
    assert (tmp_path / conf).parent / path == tmp_path / targets
