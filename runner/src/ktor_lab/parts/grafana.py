"""Grafana's provisioning and dashboards (grafana/), read for tests and rendered for `lab up`.

Grafana itself is optional natively: `lab up` starts it only when a `grafana` binary
is installed. The dashboards are checked without it by running every panel's query
against a real Prometheus (see `panel_queries` and `substitute`).
"""

from __future__ import annotations

import configparser
import json
import math
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import yaml

from .. import metrics
from ..paths import REPO

GRAFANA_DIR = REPO / "grafana"
PROVISIONING = GRAFANA_DIR / "provisioning"
DASHBOARDS = GRAFANA_DIR / "dashboards"
DATASOURCE_FILE = PROVISIONING / "datasources" / "lab.yml"
PROVIDER_FILE = PROVISIONING / "dashboards" / "lab.yml"
INI = GRAFANA_DIR / "grafana.ini"

# $var, ${var} and ${var:format}; Grafana's own ($__rate_interval, ...) start with two underscores.
VARIABLE = re.compile(r"\$(?:\{(\w+)(?::\w+)?\}|(\w+))")


@dataclass(frozen=True)
class PanelQuery:
    dashboard: str
    panel: str
    ref_id: str
    expr: str


def datasources() -> list[dict]:
    return yaml.safe_load(DATASOURCE_FILE.read_text())["datasources"]


def dashboards() -> dict[Path, dict]:
    """Every dashboard JSON file, parsed, by path."""
    return {path: json.loads(path.read_text()) for path in sorted(DASHBOARDS.glob("*.json"))}


def panels(dashboard: dict) -> list[dict]:
    """All panels, including those nested in collapsed rows; rows themselves are left out."""
    out = []
    for panel in dashboard.get("panels", []):
        if panel.get("type") == "row":
            out.extend(panel.get("panels", []))
        else:
            out.append(panel)
    return out


def panel_queries(dashboard: dict) -> list[PanelQuery]:
    return [
        PanelQuery(dashboard["uid"], panel["title"], target["refId"], target["expr"])
        for panel in panels(dashboard)
        for target in panel.get("targets", [])
    ]


def variables_used(expr: str) -> set[str]:
    return {a or b for a, b in VARIABLE.findall(expr) if not (a or b).startswith("__")}


def substitute(expr: str, values: dict[str, str], rate_interval: str) -> str:
    """`expr` as Grafana sends it: dashboard variables replaced by `values`, $__rate_interval by
    `rate_interval` (Grafana uses max(4 x scrape interval, step + scrape interval)).
    KeyError for a variable without a value."""
    expr = expr.replace("$__rate_interval", rate_interval).replace("${__rate_interval}", rate_interval)
    return VARIABLE.sub(lambda m: values[m.group(1) or m.group(2)], expr)


# Series only the engines that expose them have (the setting of lab_proxy_info that says so).
EXPOSED_BY_SOME = {"lab_client_pool_connections": "pool_metrics"}
# Series of every node of a swarm (docker-stack.yml's node-stats): no other way of running has them.
SWARM_ONLY = ("lab_node_",)


def not_exposed(proxy_settings: dict[str, str]) -> tuple[str, ...]:
    """The metrics the proxy with these settings (lab_proxy_info's labels) does not export."""
    return tuple(m for m, key in EXPOSED_BY_SOME.items() if proxy_settings.get(key) != "exposed")


def panels_without_data(
    prometheus_url: str,
    values: dict[str, str],
    rate_interval: str,
    at: float | None = None,
    absent: tuple[str, ...] = (),
    swarm: bool = False,
    auth: tuple[str, str] | None = None,
) -> list[str]:
    """Every panel query of every dashboard, as Grafana would send it with `values` for the
    variables, run against Prometheus: the ones with no result or only NaN, as "file: panel refId".
    Queries of the metrics in `absent` (not_exposed: the engine has none) are not asked for, nor,
    unless `swarm`, those of the series only the swarm stack has (its hosts). `auth`: the login of a
    Prometheus behind one (the swarm stack's gate)."""
    skipped = (*absent, *(() if swarm else SWARM_ONLY))
    empty = []
    for path, dashboard in dashboards().items():
        for q in panel_queries(dashboard):
            if any(metric in q.expr for metric in skipped):
                continue
            result = metrics.query(prometheus_url, substitute(q.expr, values, rate_interval), at, auth)
            if not any(math.isfinite(float(r["value"][1])) for r in result):
                empty.append(f"{path.name}: {q.panel} {q.ref_id}")
    return empty


def write_provisioning(run_dir: Path, prometheus_url: str, port: int) -> Path:
    """Config for a native Grafana on 127.0.0.1:`port`: grafana.ini with paths into `run_dir`,
    the datasource at `prometheus_url`, the dashboards read from the repository. Returns the ini."""
    out = run_dir / "grafana"
    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(PROVISIONING, out / "provisioning")
    ds = yaml.safe_load(DATASOURCE_FILE.read_text())
    for source in ds["datasources"]:
        source["url"] = prometheus_url
    (out / "provisioning" / "datasources" / DATASOURCE_FILE.name).write_text(
        yaml.safe_dump(ds, sort_keys=False)
    )
    providers = yaml.safe_load(PROVIDER_FILE.read_text())
    for provider in providers["providers"]:
        provider["options"]["path"] = str(DASHBOARDS)
    (out / "provisioning" / "dashboards" / PROVIDER_FILE.name).write_text(
        yaml.safe_dump(providers, sort_keys=False)
    )
    ini = configparser.ConfigParser(interpolation=None)
    ini.read(INI)
    home = Path(ini["dashboards"]["default_home_dashboard_path"])
    ini["dashboards"]["default_home_dashboard_path"] = str(DASHBOARDS / home.name)
    ini["paths"] = {
        "data": str(out / "data"),
        "logs": str(out / "logs"),
        "plugins": str(out / "plugins"),
        "provisioning": str(out / "provisioning"),
    }
    ini["server"] = {"http_addr": "127.0.0.1", "http_port": str(port)}
    with open(out / "grafana.ini", "w") as f:
        ini.write(f)
    return out / "grafana.ini"
