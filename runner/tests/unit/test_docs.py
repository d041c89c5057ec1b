"""The README and docs/ as a reader meets them: short, linked, and naming what runs."""

from __future__ import annotations

import re

from ktor_lab.paths import REPO

PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def test_every_relative_link_resolves():
    bad = []
    for page in PAGES:
        for link in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if not re.match(r"[a-z]+://", link) and not (page.parent / link).exists():
                bad.append(f"{page.relative_to(REPO)}: {link}")
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


def test_the_warm_up_trial_on_the_matrix_page_gives_its_runs_figures():
    """docs/matrix.md's paragraph on the warm-up quotes two runs kept in docs/: each figure it gives
    (the run's minutes, the later windows' CPU per request against the first, with its interval)
    is what those runs' results give, as their reports' Warmth lines say it."""
    from ktor_lab import conclusions
    from ktor_lab.results import load

    text = " ".join((REPO / "docs" / "matrix.md").read_text().split())
    paragraph = text[text.index("**Why each JVM warms for about a minute.**") :][:1500]
    for folder in ("docs/guide/small-gets", "docs/matrix-runs/jit-10"):
        results = load(REPO / folder)
        (group,) = conclusions.groups(results)
        change, low, high, _ = conclusions.later_cost(group)
        assert f"{change:+.1%}, {low:+.1%} to {high:+.1%}" in paragraph or (
            f"{change:+.1%} ({low:+.1%} to {high:+.1%})" in paragraph
        ), folder
        assert f"{results.wall_seconds / 60:.1f}" in paragraph, folder
