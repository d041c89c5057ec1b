"""grafana/: provisioning and dashboards, checked as Grafana would load them.

Grafana is not installed here: the queries of every panel run against a real Prometheus
in test_prometheus.py; this file checks the JSON and YAML themselves.
"""

from __future__ import annotations

import configparser
import re
from pathlib import Path

import pytest
import yaml

from ktor_lab.parts import grafana

DASHBOARDS = grafana.dashboards()
DS_UID = "lab-prometheus"
PROMETHEUS = {"type": "prometheus", "uid": DS_UID}
QUANTILE = re.compile(r"histogram_quantile\([0-9.]+, sum by \(le\b[^)]*\) \(rate\(\w+_bucket")


def test_one_prometheus_datasource_with_the_fixed_uid():
    [ds] = grafana.datasources()
    assert (ds["uid"], ds["type"], ds["url"]) == (DS_UID, "prometheus", "http://prometheus:9090")
    # $__rate_interval is computed from it; it must match Prometheus' scrape interval.
    prom = yaml.safe_load((grafana.REPO / "prometheus" / "prometheus.yml").read_text())
    assert ds["jsonData"]["timeInterval"] == prom["global"]["scrape_interval"]


def test_provider_puts_the_dashboards_in_a_folder():
    [provider] = yaml.safe_load(grafana.PROVIDER_FILE.read_text())["providers"]
    assert provider["type"] == "file" and provider["folder"]
    assert provider["options"]["path"] == "/var/lib/grafana/dashboards"


def test_dashboards_exist_with_unique_stable_uids_and_a_current_schema():
    assert DASHBOARDS, "no dashboard JSON in grafana/dashboards"
    uids = [d["uid"] for d in DASHBOARDS.values()]
    assert len(uids) == len(set(uids))
    for path, d in DASHBOARDS.items():
        assert re.fullmatch(r"[a-z0-9-]{1,40}", d["uid"]), path
        assert d["schemaVersion"] >= 39, path  # Grafana 11 and later
        assert d.get("id") is None, f"{path}: an exported id would clash on import"
        ids = [p["id"] for p in d["panels"]] + [p["id"] for p in grafana.panels(d)]
        assert len(set(ids)) == len({id(p) for p in d["panels"]} | {id(p) for p in grafana.panels(d)})


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_panels_go_down_the_page_without_overlapping(path):
    # Two branches that each add a row at the end merge textually into one page with two rows on
    # the same line: Grafana would load it and move panels around. Rows and open panels, in order.
    top = DASHBOARDS[path]["panels"]
    seen = []
    for panel in top:
        g = panel["gridPos"]
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24, panel["title"]
        for other in seen:
            o = other["gridPos"]
            apart = (
                g["x"] + g["w"] <= o["x"]
                or o["x"] + o["w"] <= g["x"]
                or g["y"] + g["h"] <= o["y"]
                or o["y"] + o["h"] <= g["y"]
            )
            assert apart, (panel["title"], other["title"])
        seen.append(panel)
    rows = [p["gridPos"]["y"] for p in top if p["type"] == "row"]
    assert rows == sorted(rows) and len(rows) == len(set(rows)), rows


def datasource_refs(node):
    """Every `datasource` value anywhere in a dashboard."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "datasource":
                yield value
            yield from datasource_refs(value)
    elif isinstance(node, list):
        for item in node:
            yield from datasource_refs(item)


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_every_query_is_bound_to_the_provisioned_datasource(path):
    d = DASHBOARDS[path]
    for panel in grafana.panels(d):
        if panel.get("targets"):
            assert panel["datasource"] == PROMETHEUS, panel["title"]
            for target in panel["targets"]:
                assert target["datasource"] == panel["datasource"], (panel["title"], target["refId"])
    for ref in datasource_refs(d):
        # The annotation built into every dashboard uses Grafana's own source.
        assert ref in (PROMETHEUS, {"type": "grafana", "uid": "-- Grafana --"}), ref


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_every_variable_used_is_defined(path):
    d = DASHBOARDS[path]
    defined = {v["name"] for v in d["templating"]["list"]}
    used = set()
    for q in grafana.panel_queries(d):
        used |= grafana.variables_used(q.expr)
    assert used <= defined, used - defined
    assert {"engine", "lifetime"} <= defined


def test_overview_has_the_panels_the_issue_lists():
    overview = next(d for d in DASHBOARDS.values() if d["title"] == "Lab overview")
    exprs = " ".join(q.expr for q in grafana.panel_queries(overview))
    for metric in [
        "locust_requests_total",
        "locust_users",
        "locust_failures_total",
        "locust_response_time_seconds_bucket",
        "locust_cpu_percent",
        "ktor_http_server_requests_seconds_count",
        "ktor_http_server_requests_seconds_bucket",
        "lab_upstream_requests_seconds_bucket",
        "lab_clients_opened_total",
        "lab_clients_closed_total",
        "jvm_threads_live_threads",
        "jvm_threads_peak_threads",
        "jvm_threads_daemon_threads",
        "jvm_threads_states_threads",
        "lab_threads_active_unparked",
        "process_cpu_time_ns_total",
        "jvm_memory_used_bytes",
        "jvm_gc_pause_seconds",
        "process_files_open_files",
        "nginx_http_requests_total",
        "nginx_connections_active",
        # The network and the connection figures that explain a case (issue 31).
        "lab_network_info",
        "nginx_connections_accepted",
        "lab_client_pool_connections",
        "lab_upstream_sockets",
        "ktor_http_server_requests_seconds_sum",
    ]:
        assert metric in exprs, metric


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_quantiles_come_from_histogram_buckets(path):
    for q in grafana.panel_queries(DASHBOARDS[path]):
        if "quantile" in q.expr:
            assert QUANTILE.match(q.expr), q
        assert "avg(" not in q.expr.replace(" ", ""), q


def test_substitute_fills_variables_and_the_rate_interval():
    expr = 'rate(x{engine=~"$engine", lifetime=~"${lifetime}"}[$__rate_interval])'
    assert (
        grafana.substitute(expr, {"engine": "cio", "lifetime": ".*"}, "20s")
        == 'rate(x{engine=~"cio", lifetime=~".*"}[20s])'
    )
    with pytest.raises(KeyError):
        grafana.substitute("$nope", {}, "20s")


def test_render_for_a_native_grafana(tmp_path):
    ini_path = grafana.write_provisioning(tmp_path, "http://127.0.0.1:19090", 13000)
    out = ini_path.parent
    [ds] = yaml.safe_load((out / "provisioning" / "datasources" / "lab.yml").read_text())["datasources"]
    assert (ds["uid"], ds["url"]) == (DS_UID, "http://127.0.0.1:19090")
    [provider] = yaml.safe_load((out / "provisioning" / "dashboards" / "lab.yml").read_text())["providers"]
    assert provider["options"]["path"] == str(grafana.DASHBOARDS)
    ini = configparser.ConfigParser(interpolation=None)
    ini.read(ini_path)
    assert ini["paths"]["provisioning"] == str(out / "provisioning")
    assert (ini["server"]["http_addr"], ini["server"]["http_port"]) == ("127.0.0.1", "13000")
    assert Path(ini["dashboards"]["default_home_dashboard_path"]).exists()
    assert ini["auth.anonymous"]["org_role"] == "Viewer"
    # The repository's files are untouched.
    assert grafana.datasources()[0]["url"] == "http://prometheus:9090"


def test_grafana_ini_gives_read_only_anonymous_access_and_no_default_password():
    ini = configparser.ConfigParser(interpolation=None)
    ini.read(grafana.INI)
    assert ini["auth.anonymous"]["enabled"] == "true"
    assert ini["auth.anonymous"]["org_role"] == "Viewer"
    # No password in the ini: lab-entrypoint.sh sets GF_SECURITY_ADMIN_PASSWORD (tested on a container).
    assert "admin_password" not in ini["security"]
    home = Path(ini["dashboards"]["default_home_dashboard_path"])
    assert home.parent == Path("/var/lib/grafana/dashboards")
    assert (grafana.DASHBOARDS / home.name).exists()
