"""The typed case and the one list of engines: parsing and names, the proxy's environment, and
every place outside cases.py that must list the engines, checked against it (a new engine that
one of them lacks fails here, naming the place)."""

from __future__ import annotations

import json
import re

import pytest
import yaml

from ktor_lab import versions
from ktor_lab.cases import (
    ALL,
    CASES,
    ENGINES,
    HTTP1_ONLY,
    LIFETIMES,
    SCENARIOS,
    Case,
    all_of,
    case_list,
    engine_list,
)
from ktor_lab.parts import compose
from ktor_lab.paths import MODULE_FOLDERS, PROXY_DIR, REPO


@pytest.mark.parametrize(
    "text,case",
    [
        ("per-call-okhttp", Case("per-call", "okhttp")),
        ("singleton-apache5", Case("singleton", "apache5")),
        ("per-call-okhttp ktor 3.5.1 jdk 25", Case("per-call", "okhttp", ktor="3.5.1", java="25")),
        ("singleton-cio protocol h2 rtt 50", Case("singleton", "cio", protocol="h2", rtt_ms=50)),
        ("singleton-cio rtt 50ms", Case("singleton", "cio", rtt_ms=50)),
    ],
)
def test_a_case_parses_from_its_text_and_writes_the_same_name(text, case):
    assert Case.parse(text) == case
    assert Case.parse(case.name) == case
    assert case.id == text.split()[0] and case.base == Case(case.lifetime, case.engine)


def test_dimensions_at_their_defaults_are_left_out_of_the_name():
    case = Case("per-call", "java", ktor="3.5.1", protocol="http", rtt_ms=0)
    assert case.name == "per-call-java ktor 3.5.1"
    assert case.dimensions() == {"ktor": "3.5.1"}
    assert "OkHttp" in Case.parse("singleton-okhttp").title()


@pytest.mark.parametrize(
    "text,message",
    [
        ("singleton-netty", "unknown case 'singleton-netty'; valid cases: singleton-cio"),
        ("forever-cio", "unknown case 'forever-cio'"),
        ("singleton-cio ktor", "each dimension is a word and a value"),
        ("singleton-cio color red", "unknown dimension 'color'"),
        ("singleton-cio protocol gopher", "protocol 'gopher': give one of http, https, h2"),
        ("singleton-cio rtt -5", "UPSTREAM_RTT_MS='-5' is not valid; valid values: whole milliseconds"),
    ],
)
def test_a_bad_case_is_refused_naming_what_is_valid(text, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        Case.parse(text)


def test_lists_of_cases_and_engines():
    assert case_list("singleton-cio, per-call-java") == [Case("singleton", "cio"), Case("per-call", "java")]
    assert engine_list("cio,okhttp") == ["cio", "okhttp"]
    with pytest.raises(ValueError, match="unknown engine 'netty'; engines: cio, apache"):
        engine_list("cio,netty")
    assert [c.id for c in ALL] == list(CASES) and len(CASES) == len(ENGINES) * len(LIFETIMES)
    assert all_of(CASES, "cases") == f"all {len(CASES)} cases"


def test_the_proxy_environment_of_a_case_is_its_engine_and_lifetime():
    assert Case.parse("per-call-okhttp ktor 3.5.1").proxy_env() == {
        "CLIENT_ENGINE": "okhttp",
        "CLIENT_LIFETIME": "per-call",
    }


# --- every place that lists the engines --------------------------------------------------------


@pytest.mark.parametrize("case", ALL, ids=CASES)
def test_each_case_has_its_overlay_holding_exactly_its_proxy_environment(case):
    path = compose.overlay(case.id)
    assert path.exists(), f"{path.relative_to(REPO)} is missing; it holds:\n{compose.overlay_text(case)}"
    assert path.read_text() == compose.overlay_text(case)
    raw = yaml.safe_load(path.read_text())
    assert raw["services"]["proxy"]["environment"] == case.proxy_env()


def test_no_overlay_names_a_case_the_lab_does_not_know():
    extras = set(compose.EXTRA_OVERLAYS)
    assert {p.stem for p in compose.OVERLAYS.glob("*.yml")} - extras == set(CASES)
    assert all(compose.overlay(extra).exists() for extra in extras)


def test_the_proxy_knows_exactly_the_lab_s_engines_and_lifetimes():
    """proxy-app's ProxyConfig.kt: its Engine and Lifetime enums (what CLIENT_ENGINE and
    CLIENT_LIFETIME accept), and each engine's setup in its own source root, named as the enum says
    (src/engines/<id>/kotlin: built only for the releases that publish the engine)."""
    text = (PROXY_DIR / "src" / "main" / "kotlin" / "lab" / "proxy" / "config" / "ProxyConfig.kt").read_text()

    def entries(enum: str) -> list[tuple[str, ...]]:
        body = re.search(rf"enum class {enum}\(.*?\{{(.*?)\}}", text, re.S)[1]
        return [
            tuple(re.findall(r'"([\w-]+)"', args)) for args in re.findall(r"^\s+\w+\((.*?)\),", body, re.M)
        ]

    engines = entries("Engine")
    assert tuple(e[0] for e in engines) == ENGINES
    assert tuple(e[0] for e in entries("Lifetime")) == LIFETIMES
    for engine, setup in engines:
        root = PROXY_DIR / "src" / "engines" / engine / "kotlin"
        path = root / "lab" / "proxy" / "client" / "engines" / f"{setup}.kt"
        assert path.exists(), f"{path.relative_to(REPO)} is missing"
    assert {p.name for p in (PROXY_DIR / "src" / "engines").iterdir()} == set(ENGINES)


def test_the_plain_clients_are_built_for_exactly_the_lab_s_engines():
    """plain-client's PlainClients.kt (the reference of lab bench and the engines study) names one
    object per engine, each in the engine's own source root."""
    plain = REPO / MODULE_FOLDERS["plain-client"] / "src"
    text = (plain / "main" / "kotlin" / "lab" / "plain" / "PlainClients.kt").read_text()
    listed = re.findall(r'^        "([\w-]+)" to "(\w+)",', text, re.M)
    assert tuple(engine for engine, _ in listed) == ENGINES
    for engine, name in listed:
        path = plain / "engines" / engine / "kotlin" / "lab" / "plain" / f"{name}.kt"
        assert path.exists() and f"object {name} : PlainEngine" in path.read_text(), path
    assert {p.name for p in (plain / "engines").iterdir()} == set(ENGINES)


def test_each_engine_has_one_maven_profile_per_module_that_builds_it():
    """proxy-app's and plain-client's pom.xml: a profile per engine, on unless -Dno.<engine>=true,
    with its Ktor artifact and its source root."""
    for module in ("proxy-app", "plain-client"):
        pom = (REPO / MODULE_FOLDERS[module] / "pom.xml").read_text()
        ids = re.findall(r"<id>engine-([\w-]+)</id>\s*<activation>", pom)
        assert tuple(ids) == ENGINES, module
        for engine in ENGINES:
            assert f"<name>no.{engine}</name><value>!true</value>" in pom, (module, engine)
            assert f"<artifactId>ktor-client-{engine}-jvm</artifactId>" in pom, (module, engine)
            assert f"<source>src/engines/{engine}/kotlin</source>" in pom, (module, engine)


def test_the_engines_without_http2_are_those_the_proxy_refuses_it_through():
    """cases.HTTP1_ONLY (what lab run, lab up and the protocols study refuse or skip) is exactly
    the engines whose <Engine>Setup.kt refuses CLIENT_HTTP_VERSION=2 at the proxy's start."""
    refusing = {
        p.stem.removesuffix("Setup").lower()
        for p in (PROXY_DIR / "src").rglob("engines/*Setup.kt")
        if "config.refuseHttp2(" in p.read_text()
    }
    assert refusing == set(HTTP1_ONLY)


def test_every_release_publishes_engines_of_the_list_and_each_engine_has_a_release():
    for release in versions.releases():
        assert set(release.engines) <= set(ENGINES), (release.name, release.engines)
    for engine in ENGINES:
        assert versions.publishing(engine), f"no release of ktor-releases.tsv publishes {engine}"


DOC_LISTS = [
    ("README.md", r"compose/\{singleton,per-call\}-\{([^}]+)\}\.yml"),
    ("docs/compose.md", r"compose/\{singleton,per-call\}-\{([^}]+)\}\.yml"),
    ("docs/native.md", r"the engine one of\s+(.+?)\s+\("),
    ("docs/proxy.md", r"\| `CLIENT_ENGINE` \| ([^|]+) \|"),
    ("docs/proxy.md", r"CLIENT_ENGINE='netty' is not valid; valid values: ([\w, ]+)"),
]


@pytest.mark.parametrize("page,pattern", DOC_LISTS, ids=[f"{p}:{i}" for i, (p, _) in enumerate(DOC_LISTS)])
def test_the_docs_list_every_engine_where_they_list_them(page, pattern):
    m = re.search(pattern, (REPO / page).read_text(), re.S)
    assert m, f"{page} no longer lists the engines where this test looks ({pattern})"
    assert tuple(re.findall(r"[a-z][a-z0-9]*", m[1])) == ENGINES, (page, m[1])


def test_the_docs_table_of_releases_is_ktor_releases_tsv():
    text = (REPO / "docs" / "versions.md").read_text()
    for release in versions.releases():
        row = re.search(
            rf"^\| {re.escape(release.name)} \| {re.escape(release.kotlin)} \| ([^|]+) \|", text, re.M
        )
        assert row and tuple(re.findall(r"[a-z0-9]+", row[1])) == release.engines, release


def test_grafana_finds_the_engines_in_the_metrics_rather_than_listing_them():
    for path in (REPO / "grafana" / "dashboards").glob("*.json"):
        for var in json.loads(path.read_text()).get("templating", {}).get("list", []):
            if var["name"] == "engine":
                if var["type"] == "custom":
                    assert tuple(var["query"].split(",")) == ENGINES, path.name
                else:
                    assert "label_values" in json.dumps(var["query"]), path.name


# Pages that record a dated run may say how many cases it had; every other text must not count.
RECORDS = ("docs/matrix.md", "docs/benchmarks.md")


def test_no_help_text_counts_the_engines_or_cases_by_hand():
    stale = re.compile(r"all (five|ten|5|10)\b|\b(five|ten) (engines|cases)\b")
    texts = [
        *(REPO / "runner" / "src").rglob("*.py"),
        *(REPO / "locust").rglob("*.py"),
        *(REPO / "proxy-app" / "src" / "main").rglob("*.kt"),
        *(REPO / "compose").glob("*.yml"),
        REPO / "docker-compose.yml",
        REPO / "Makefile",
        REPO / "README.md",
        *(p for p in (REPO / "docs").glob("*.md") if str(p.relative_to(REPO)) not in RECORDS),
    ]
    found = [f"{p.relative_to(REPO)}: {m[0]}" for p in texts for m in stale.finditer(p.read_text())]
    assert not found, found


def test_the_scenarios_are_the_locustfile_s_own():
    text = (REPO / "locust" / "locustfile.py").read_text()
    assert SCENARIOS == tuple(re.findall(r'@scenario\("([\w-]+)"\)', text))
    assert "static-small, static-large" not in text, "the locustfile's help lists its scenarios by hand"


def test_the_proxy_page_s_tables_per_engine_have_a_row_for_every_engine():
    """docs/proxy.md: the limits and the retry on stale connections, one row per engine."""
    tables = re.findall(
        r"^\| engine \|.*\n\|[- |]+\n((?:\|.*\n)+)", (REPO / "docs" / "proxy.md").read_text(), re.M
    )
    assert len(tables) >= 2
    for rows in tables:
        labels = [re.match(r"\| (\w+)", row)[1].lower() for row in rows.splitlines()]
        assert tuple(labels) == ENGINES, labels


def test_every_engine_has_what_users_should_know_of_it():
    from ktor_lab.cases import ENGINE_FACTS

    assert tuple(ENGINE_FACTS) == ENGINES
    assert "deprecated" in ENGINE_FACTS["apache"] and "HTTP/1" in ENGINE_FACTS["cio"]
    assert "thread" in ENGINE_FACTS["okhttp"]


def test_every_field_of_a_case_beyond_its_lifetime_and_engine_is_a_declared_dimension():
    """What a case varies is declared in cases.DIMENSIONS, from which its option, its place in a
    plan and a run, and its variables follow (test_dimensions.py)."""
    import dataclasses

    from ktor_lab.cases import DIMENSIONS

    case_fields = {f.name for f in dataclasses.fields(Case)}
    assert case_fields - {"lifetime", "engine"} == {d.field for d in DIMENSIONS}


def test_every_engine_has_its_packages_for_the_profiler():
    from ktor_lab.cases import ENGINE_PACKAGES

    assert tuple(ENGINE_PACKAGES) == ENGINES and all(ENGINE_PACKAGES.values())
