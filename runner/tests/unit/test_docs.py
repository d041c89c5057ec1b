"""The README and docs/ as a reader meets them: short, linked, and naming what runs."""

from __future__ import annotations

import functools
import json
import re
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

from ktor_lab.paths import REPO

PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def test_every_relative_link_resolves():
    bad = []
    for page in PAGES:
        for link in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if not re.match(r"[a-z]+://", link) and not (page.parent / link).exists():
                bad.append(f"{page.relative_to(REPO)}: {link}")
    assert not bad, bad


def slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it: lower case, punctuation dropped, spaces as dashes."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(text: str) -> set[str]:
    """A page's heading anchors, as GitHub numbers a repeated one (`-1`); none from fenced code."""
    seen: dict[str, int] = {}
    out = set()
    for heading in re.findall(r"^#+ (.+)$", re.sub(r"```.*?```", "", text, flags=re.S), re.M):
        base = slug(heading)
        out.add(base if base not in seen else f"{base}-{seen[base]}")
        seen[base] = seen.get(base, 0) + 1
    return out


def test_every_anchor_names_a_heading_of_its_page():
    """`page.md#anchor` lands on a heading: an anchor left from a renamed section fails here."""
    bad = []
    for page in PAGES:
        for link, anchor in re.findall(r"\]\(([^)#\s]*)#([^)\s]+)\)", page.read_text()):
            target = page.parent / link if link else page
            if target.suffix != ".md" or not target.exists():
                continue
            headings = anchors(target.read_text())
            if anchor not in headings:
                bad.append(f"{page.relative_to(REPO)}: {link}#{anchor}")
    assert not bad, bad


def test_the_readme_is_short_and_gives_the_two_commands_and_the_compose_one():
    text = (REPO / "README.md").read_text()
    assert len(text.splitlines()) <= 80
    assert "make run CASE=singleton-cio" in text and "make test " in text
    assert "docker compose -f docker-compose.yml -f compose/singleton-cio.yml up" in text
    ci = (REPO / ".ci" / "run").read_text()
    assert re.search(r"^make test$", ci, re.M), "CI must run the README's test command"


def test_every_docs_page_is_in_the_index():
    index = (REPO / "docs" / "README.md").read_text()
    for page in (REPO / "docs").glob("*.md"):
        if page.name != "README.md":
            assert f"({page.name})" in index, page.name


# What a reader of the repository meets: the pages, and the comments of the compose files, .env
# and the Makefile.
REFERRING = [
    *PAGES,
    *sorted((REPO / "compose").glob("*.yml")),
    REPO / ".env",
    REPO / "Makefile",
]


def test_no_link_or_file_reference_leaves_the_repository():
    """A clone has nothing above its root: no relative path may climb out of it (a Markdown link
    or a path in text, from the file's own folder), no link may be absolute, and nothing may
    name the `../shared` folder of the machine the lab was built on."""
    root = REPO.resolve()
    bad = set()
    for path in REFERRING:
        text, name = path.read_text(), path.relative_to(REPO)
        bad |= {f"{name}: {m}" for m in re.findall(r"(?:\.\./)+shared\b[\w./-]*", text)}
        for ref in re.findall(r"(?<![\w./-])((?:\.\./)+[\w./-]*)", text):
            if not (path.parent / ref).resolve().is_relative_to(root):
                bad.add(f"{name}: {ref} (outside the repository)")
        for link in re.findall(r"\]\(\s*((?:/|file:)[^)\s]*)", text):
            bad.add(f"{name}: {link} (an absolute link)")
    assert not bad, sorted(bad)


def test_the_warm_up_paragraph_on_the_matrix_page_gives_its_runs_figures():
    """docs/matrix.md's paragraph on the warm-up quotes the three default runs kept in docs/: each
    figure it gives (the run's minutes, the later windows' CPU per request against the first, with
    its interval) is what those runs' results give, as their reports' Warmth lines say it."""
    from ktor_lab import conclusions
    from ktor_lab.results import load

    text = " ".join((REPO / "docs" / "matrix.md").read_text().split())
    paragraph = text[text.index("**Why each JVM warms for about a minute.**") :][:1500]
    for name in ("stricter-warmup", "default", "default-again"):
        folder = f"docs/matrix-runs/{name}"
        results = load(REPO / folder)
        (group,) = conclusions.groups(results)
        change, low, high, _ = conclusions.later_cost(group)
        assert f"{change:+.1%}, {low:+.1%} to {high:+.1%}" in paragraph or (
            f"{change:+.1%} ({low:+.1%} to {high:+.1%})" in paragraph
        ), folder
        assert f"{results.wall_seconds / 60:.1f}" in paragraph, folder


def test_the_shared_noise_paragraph_on_the_matrix_page_gives_its_run_s_figures():
    """docs/matrix.md's paragraph on the noise shared with the generator quotes run E's figures as
    its report's appendix computes them from its results: r with its interval, windows and JVMs,
    the share of the variance, and the spread before and less that part."""
    from ktor_lab import conclusions
    from ktor_lab.results import load

    text = " ".join((REPO / "docs" / "matrix.md").read_text().split())
    paragraph = text[text.index("**Half of the window noise is shared with the generator.**") :][:1200]
    (group,) = conclusions.groups(load(REPO / "docs" / "matrix-runs" / "default-fourth"))
    r, low, high, windows, jvms, before, after = conclusions.shared_noise(group)
    said = f"r = {r:.2f} ({low:.2f} to {high:.2f}; {windows} windows of {jvms} JVMs): {r**2:.0%} of the"
    assert said in paragraph, said
    assert f"varied by {before:.1%}, and by {after:.1%} less that part" in paragraph
    assert r**2 > 0.4 and "**Half" in paragraph  # the heading's "half" is the run's


# The default runs the matrix page's table of claims gives, by its columns' names.
DEFAULT_RUNS = {
    "run A": "docs/matrix-runs/stricter-warmup",
    "run B": "docs/matrix-runs/default",
    "run C": "docs/matrix-runs/default-again",
    "run D": "docs/matrix-runs/default-third",
    "run E": "docs/matrix-runs/default-fourth",
    "run F": "docs/matrix-runs/fresh-clone",
    "run G": "docs/matrix-runs/fresh-clone-again",
    "run H": "docs/guide/small-gets",
}


def test_each_cell_of_the_matrix_page_s_table_of_claims_is_its_own_run_s_first_screen():
    """docs/matrix-runs/README.md's table of the default runs' claims: every figure of a run's column is on
    that run's own first screen (its report's Verdict section), not only somewhere among the runs
    the page links: a figure copied into the wrong column, or left from an older run, fails."""
    text = (REPO / "docs" / "matrix-runs" / "README.md").read_text()
    lines = [x for x in text.splitlines() if x.startswith("| claim | run A")]
    assert lines, "the table of claims"
    table = text[text.index(lines[0]) :].split("\n\n")[0].splitlines()
    columns = [c.strip() for c in table[0].strip("|").split("|")][1:]
    assert columns == list(DEFAULT_RUNS), columns
    screens = {}
    for name, folder in DEFAULT_RUNS.items():
        report = (REPO / folder / "report.md").read_text()
        screens[name] = set(figures(report.split("## Verdict")[1].split("\n## ")[0]))
    bad = []
    for row in table[2:]:
        cells = [c.strip() for c in row.strip("|").split("|")]
        for name, cell in zip(columns, cells[1:], strict=True):
            bad += [f"{name}, {cells[0]}: {f}" for f in figures(cell) if f not in screens[name]]
    assert len(table) > 8 and not bad, bad


# A figure in prose: 1,234 or 12.5 (of 12.5%, 1.32x, 4,619 ms), not a part of a name or a version
# (Apache5, HTTP/2, 3.5.2). Single digits are left out: they count JVMs, windows and the like.
FIGURE = re.compile(r"(?<![\w.,/])(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?!\.?\d)")


def figures(text: str) -> list[Decimal]:
    found = [Decimal(m.group(0).replace(",", "")) for m in FIGURE.finditer(text)]
    return [f for f in found if f >= 10 or f != f.to_integral_value()]


def quoted(figure: Decimal, values: set[Decimal]) -> bool:
    """The figure is one of `values` as it reads, or rounded to its own decimals."""
    step = Decimal(1).scaleb(figure.as_tuple().exponent)
    return any(abs(v - figure) <= step and v.quantize(step, ROUND_HALF_UP) == figure for v in values)


def summary_lines() -> list[tuple[Path, str]]:
    """The lines whose role is to sum up another page: findings.md's bullets and the studies
    index's rows (the last column, a dry run's time, aside)."""
    findings = REPO / "docs" / "findings.md"
    index = REPO / "docs" / "studies" / "README.md"
    lines = [(findings, x) for x in re.split(r"\n(?=- |#)", findings.read_text())]
    rows = [x for x in index.read_text().splitlines() if x.startswith("| [")]
    return lines + [(index, x.rsplit("|", 2)[0]) for x in rows]


def test_a_summary_line_gives_only_figures_the_page_it_links_gives():
    """What findings.md and the studies index say of a measurement is what the page they link to
    says (a generated page, a run's report, or a study page): every figure of such a line is on
    one of its linked pages, as it reads there or rounded. A line cannot drift from its evidence."""
    bad = []
    for page, line in summary_lines():
        links = [x.split("#")[0] for x in re.findall(r"\]\(([^)]+)\)", line)]
        evidence = [page.parent / x for x in links if x.endswith(".md")]
        if not evidence:
            continue
        values = {v for p in evidence for v in figures(p.read_text())}
        prose = re.sub(r"`[^`]*`", "", re.sub(r"\]\([^)]*\)", "]", line))
        for f in figures(prose):
            if not quoted(f, values):
                bad.append(f"{page.name}: {f} is on none of {links}: {' '.join(prose.split())[:90]}...")
    assert not bad, "\n".join(bad)


@functools.cache
def run_figures(folder: Path) -> frozenset[Decimal]:
    """Every figure the study runs kept in `folder` (and its subfolders, one run each) give: the
    numbers of their JSON files (results, settings, the claim replayed, JMH's own), and those of
    the reports the lab wrote from them. Read once a test session: many sentences link one run."""
    values: set[Decimal] = set()

    def walk(o) -> None:
        if isinstance(o, dict):
            for v in o.values():
                walk(v)
        elif isinstance(o, list):
            for v in o:
                walk(v)
        elif isinstance(o, bool) or o is None:
            return
        elif isinstance(o, int | float):
            values.add(Decimal(repr(o)))
        elif isinstance(o, str):
            values.update(figures(o))

    if folder.is_file():  # a kept `lab compare` output (compare-*.txt)
        return frozenset(figures(folder.read_text()))
    for path in sorted(folder.rglob("*.json")):
        walk(json.loads(path.read_text()))
    for path in sorted([*folder.rglob("report*.md"), *folder.rglob("bench.md")]):
        values.update(figures(path.read_text()))
    return frozenset(values)


def prose_of(page: str) -> str:
    """A page as its reader reads figures in it: no code (commands), no link targets, no issue keys
    (KTOR-9146)."""
    text = re.sub(r"```.*?```|\b[A-Z]+-\d+\b", "", page, flags=re.S)
    return re.sub(r"`[^`]*`", "", re.sub(r"\]\([^)]*\)", "]", text))


def hand_written_study_pages() -> list[Path]:
    """Study pages written by hand: those of the studies with a runner of their own (their folder
    keeps a run's results*.json, not a plan's study.json, whose page `lab guide` writes)."""
    studies = REPO / "docs" / "studies"
    runs = {p.parent for p in studies.glob("*/results*.json")}
    kept = runs - {p.parent for p in studies.glob("*/study.json")}
    return [page for page in sorted(studies.glob("*.md")) if studies / page.stem in kept]


def linked_runs(page: Path, text: str) -> set[Path]:
    """The run folders `text` (on `page`) links to: a report.md beside its results.json, a `lab
    bench` run's bench.md beside its bench.json, and a study page's own folder (a figure quoted
    from one); and a kept `lab compare` output (a file)."""
    folders = set()
    for link in re.findall(r"\]\(([^)#]+\.(?:md|json|txt))(?:#[^)]*)?\)", text):
        target = page.parent / link
        if target.name == "report.md" and target.with_name("results.json").exists():
            folders.add(target.parent)
        elif target.name == "bench.md" and target.with_name("bench.json").exists():
            folders.add(target.parent)
        elif target.suffix == ".json" and target.exists():  # a run that writes only its results
            folders.add(target.parent)
        elif target.name.startswith("compare-") and target.suffix == ".txt" and target.exists():
            folders.add(target)
        elif (target.parent / target.stem).is_dir():
            folders.add(target.parent / target.stem)
    return folders


def evidence_of(page: Path) -> set[Decimal]:
    """The figures of the runs a page stands on: those kept in its own folder (a study page's
    docs/studies/NAME/) and in the runs it links to (`linked_runs`)."""
    folders = {page.parent / page.stem, *linked_runs(page, page.read_text())}
    return set().union(*(run_figures(f) for f in folders if f.exists()))


def unsupported(page: Path) -> list[str]:
    values = evidence_of(page)
    return [f"{page.name}: {f}" for f in figures(prose_of(page.read_text())) if not quoted(f, values)]


def test_a_hand_written_study_page_gives_only_figures_its_runs_give():
    """Every figure on the page of a study with a runner of its own (threads, streaming, engines,
    io, faults), in its prose and tables alike, is one its kept runs give, or those of a study page
    it links to: in their results (rows, settings, the published claim replayed) or in the reports
    the lab wrote from them, as it reads there or rounded. A figure typed by hand, or left from an
    earlier run, fails here."""
    pages = hand_written_study_pages()
    assert {p.stem for p in pages} >= {"threads", "streaming", "engines", "io", "faults"}
    bad = [line for page in pages for line in unsupported(page)]
    assert not bad, f"{len(bad)} figures on no run the page keeps: {', '.join(bad)}"


def test_each_default_run_s_readme_names_its_commit_and_minutes_as_its_results_give_them():
    """The account of each default run (what ran, at which commit, what differed) is its own
    README beside its results: the commit and the minutes it gives are its results'."""
    from ktor_lab.results import load

    for name, folder in DEFAULT_RUNS.items():
        text = " ".join((REPO / folder / "README.md").read_text().split())
        results = load(REPO / folder)
        assert f"# Run {name.removeprefix('run ')} of the default matrix" in text, folder
        assert f"`{results.environment['commit'][:12]}`" in text, folder
        assert f"{results.wall_seconds / 60:.1f} min" in text, folder


def test_the_default_runs_page_gives_only_figures_of_the_runs_it_links_to():
    bad = unsupported(REPO / "docs" / "matrix-runs" / "README.md")
    assert not bad, f"{len(bad)} figures on no run the page links to: {', '.join(bad)}"


def test_the_matrix_page_gives_only_figures_of_the_runs_it_links_to():
    """docs/matrix.md explains `lab run` and quotes its kept runs (the default matrix twice, the
    warm-up rule's trial): every figure it gives, settings and measurements alike, is in one of the
    runs it links to, as it reads there or rounded."""
    bad = unsupported(REPO / "docs" / "matrix.md")
    assert not bad, f"{len(bad)} figures on no run the page links to: {', '.join(bad)}"


# The files whose figures docs/proxy.md may give when its section names them: the proxy's code and
# the lab's tests (a default, a limit, what a test holds).
SOURCES = [*sorted((REPO / "proxy-app" / "src").rglob("*.kt")), *sorted((REPO / "runner").rglob("*.py"))]
# Not figures of the lab's: RFC sections, releases (JDK 17), issues and the unit of a rate.
NAMES = re.compile(
    r"RFC \d+(?: sections?(?:,? (?:and )?\d+(?:\.\d+)*)+)?|\b(?:JDK|Java) \d+|\bissue \d+|per 1,000\b"
)
# A figure followed by what it counts (or by another figure: `200 504s`) is a count, never a status.
COUNT = re.compile(
    r"(\d[\d,]*)(?=\s+(?:requests?|answers?|rps|callers?|users?|threads?|tries|calls?|connections?"
    r"|windows?|clients?|files?|bytes?|JVMs?|rows?|lines?|\d))"
)


def numbers_in(text: str) -> set[Decimal]:
    """The numbers written in code or configuration (Kotlin's 3_600_000 too), and a whole number of
    seconds for each whole thousand (30000 ms: 30 s)."""
    found = {Decimal(m.replace("_", "")) for m in re.findall(r"(?<!\w)(?<!\d\.)\d[\d_]*(?:\.\d+)?", text)}
    return found | {v / 1000 for v in found if v >= 1000 and v % 1000 == 0}


def code_figures(names: set[str]) -> set[Decimal]:
    """The numbers written in the SOURCES named `names` (`ProxyConfig.kt`)."""
    return set().union(*(numbers_in(p.read_text()) for p in SOURCES if p.name in names))


def statuses_in(sentence: str) -> set[Decimal]:
    """The HTTP status codes (Python's http.HTTPStatus, RFC 9110's list) a sentence may give as
    statuses: not a number it writes as a count (`500 requests`)."""
    from http import HTTPStatus

    counts = {Decimal(m.replace(",", "")) for m in COUNT.findall(sentence)}
    return {Decimal(s.value) for s in HTTPStatus} - counts


def sentences(section: str) -> list[tuple[str, str]]:
    """A section's sentences, a table row or a list item ending one too, each with the text whose
    links are its evidence: the sentence's own, and for a table row the paragraph that leads into
    the table too (its rows cannot carry a link each)."""
    out, lead = [], ""
    for paragraph in section.split("\n\n"):
        table = paragraph.lstrip().startswith("|")
        for block in re.split(r"\n(?=- |\| )", paragraph):
            for s in re.split(r"(?<=\.)\s+(?=[A-Z(*`\[])", block):
                out.append((s, f"{lead}\n{s}" if table else s))
        if not table:
            lead = paragraph
    return out


def unbacked(page: Path, text: str, known: set[Decimal]) -> list[str]:
    """The figures of `text` (on `page`), sentence by sentence, that are neither in `known`, nor an
    HTTP status written as one, nor in a run the sentence links to; names (RFC sections, releases,
    issues) are not figures."""
    bad = []
    for sentence, links in sentences(text):
        prose = prose_of(RELEASES.sub("", NAMES.sub("", sentence)))
        values = known | statuses_in(prose) | set().union(*(run_figures(f) for f in linked_runs(page, links)))
        bad += [
            f"{page.name}: {f} in: {' '.join(sentence.split())[:100]}"
            for f in figures(prose)
            if not quoted(f, values)
        ]
    return bad


def test_the_proxy_page_gives_each_figure_beside_its_evidence():
    """docs/proxy.md: every figure of a sentence is one that the code or tests its section names give
    (a default, a limit, what a test holds), an HTTP status code written as one (`statuses_in`), or
    one of the runs the sentence itself links to, as it reads there or rounded. A measured figure
    without its run beside it fails here, and so does a default the code no longer has. Figures in
    backticks are code (a version, a port, a literal value) and not read."""
    page = REPO / "docs" / "proxy.md"
    bad = []
    for section in re.split(r"\n(?=## )", page.read_text()):
        code = code_figures({n.rsplit("/", 1)[-1] for n in re.findall(r"`([\w./-]+\.(?:kt|py))`", section)})
        bad += unbacked(page, section, code)
    assert not bad, f"{len(bad)} figures with no evidence beside them:\n" + "\n".join(bad)


# The pages that explain a part (settings, ports, commands): each held by the test below. Every other
# user page is generated or held by a test above (asserted in that test).
PART_PAGES = ["README.md", *(f"docs/{n}.md" for n in (
    "README", "compose", "load", "native", "network", "observability", "security", "swarm", "testing",
    "upstream", "versions",
))]  # fmt: skip
# A release named after its product (Docker 20.10, nginx 1.22, Python 3.11), an issue or a CVE.
RELEASES = re.compile(
    r"\b(?:Docker|Engine|nginx|njs|Prometheus|Python|Go|TLS|Debian|Temurin|Locust|Grafana|Toxiproxy)"
    r" v?\d+(?:\.\d+)*|#\d+|CVE-\d+-\d+"
)


def repository_figures() -> set[Decimal]:
    """The numbers written in the lab's own code and configuration, where a setting a page gives (a
    port, a default) is set: not its pages (any .md), its tests (their fixtures hold figures of
    every kind) or data (JSON, CSV, TSV)."""
    import subprocess

    listed = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True)
    values: set[Decimal] = set()
    for name in listed.stdout.split():
        path = REPO / name
        if name.startswith(("docs/", "runner/tests/")) or path.suffix in (
            ".md",
            ".json",
            ".csv",
            ".tsv",
            ".png",
            ".svg",
            ".jar",
        ):
            continue
        try:
            values |= numbers_in(path.read_text())
        except (UnicodeDecodeError, FileNotFoundError, IsADirectoryError):
            continue
    return values


def test_a_page_on_a_part_gives_only_figures_of_the_lab_or_of_the_run_beside_them():
    """README.md and the pages on a part: every figure of a sentence is written in the lab's own
    code or configuration (a port, a default, a limit), is an HTTP status code written as one, or is
    in a run the sentence itself links to (a measurement beside its run). A measured figure typed by hand
    (a rate, a time, a count) fails here. Every user page is held by this test or another of this
    file, or written by `lab guide`."""
    held = {"matrix", "benchmarks", "proxy", "findings", "guide"}
    pages = {REPO / p for p in PART_PAGES}
    assert {p for p in (REPO / "docs").glob("*.md") if p.stem not in held} <= pages
    known = repository_figures()
    bad = [line for page in sorted(pages) for line in unbacked(page, page.read_text(), known)]
    assert not bad, f"{len(bad)} figures neither the lab's nor of a run beside them:\n" + "\n".join(bad)


def test_the_benchmarks_page_gives_only_figures_of_the_bench_runs_it_links_to():
    """docs/benchmarks.md explains `lab bench` and quotes the runs kept in docs/bench-runs/: every
    figure it gives, settings and measurements alike, is in one of the runs it links to (bench.json,
    or the bench.md the lab wrote from it), as it reads there or rounded."""
    page = REPO / "docs" / "benchmarks.md"
    assert re.search(r"\]\(bench-runs/[^)]+/bench\.md\)", page.read_text()), "it links to no kept run"
    bad = unsupported(page)
    assert not bad, f"{len(bad)} figures on no run the page links to: {', '.join(bad)}"


def test_a_kept_comparison_is_what_lab_compare_prints_for_its_two_runs(capsys):
    """A `lab compare` output kept in docs/ (compare-*.txt) is what `lab compare` prints today for
    the two runs its first lines name (with --force where it says so): a hand edit, or an output
    left from older code or runs, fails here."""
    from ktor_lab import cli

    kept = sorted((REPO / "docs").rglob("compare-*.txt"))
    assert kept
    for path in kept:
        text = path.read_text()
        new, old = re.search(r"^NEW (\S+) against OLD (\S+):", text, re.M).groups()
        forced = ["--force"] if "compared anyway (--force)" in text else []
        capsys.readouterr()
        assert cli.main(["compare", *forced, str(REPO / old), str(REPO / new)]) == 0, path
        printed = capsys.readouterr().out.replace(str(REPO) + "/", "")
        assert printed == text, path


def test_a_kept_bench_run_s_summary_and_table_are_what_its_rounds_give():
    """A `lab bench` run kept in docs/ is what the lab wrote: its summary and bench.md are those that
    `lab bench --report` writes from its rounds (a hand-edited figure, or a summary left from older
    code, fails here)."""
    from ktor_lab.commands import bench
    from ktor_lab.results import CONVERTER

    kept = sorted((REPO / "docs").rglob("bench.json"))
    assert kept
    for path in kept:
        run = json.loads(path.read_text())
        results, text = bench.summary(
            run["settings"], CONVERTER.structure(run["rounds"], list[bench.BenchWindow])
        )
        assert json.loads(json.dumps(CONVERTER.unstructure(results))) == run["results"], path
        assert path.with_name("bench.md").read_text() == text + "\n", path
