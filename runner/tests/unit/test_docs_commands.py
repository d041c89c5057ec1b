"""Every `lab ...` command the README and docs print works as printed: each line of their code
blocks, and each command written inline with its arguments, goes through `lab ... --dry-run`,
which checks what it is given (cases, dimensions, options, the plan and what it skips) and starts,
builds and downloads nothing. A refusal fails here, naming the page and the line.

Placeholders a page writes for the reader to fill are filled as a reader would: CASE with a case,
NAME with each study, results/<time> (and lab compare's OLD, NEW, results/before and after) with a
stored result, lab bench's --report DIR with a kept bench run. Templates (with `...`, `[...]` or
`a|b`) and bare names of commands (`lab up`, with nothing after it) are not commands to run."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from ktor_lab import cli, studies, versions
from ktor_lab.paths import REPO

# The pages a user reads; a stored run's report.md (beside its results.json) is left out: its first
# lines record the command that made it, as it was given then.
PAGES = [
    REPO / "README.md",
    *sorted(
        p
        for p in (REPO / "docs").rglob("*.md")
        if not (p.name == "report.md" and p.with_name("results.json").exists())
    ),
]
FIXTURE = Path(__file__).parents[1] / "fixtures" / "results-small"
COMMAND = re.compile(r"^(?:\.venv/bin/)?lab (\S.*)$")


def commands() -> list[tuple[str, str]]:
    """(where, the command after `lab `) for every command line and inline command of the pages."""
    found = []
    for page in PAGES:
        text, name = page.read_text(), str(page.relative_to(REPO))
        for block in re.findall(r"```[a-z]*\n(.*?)```", text, re.S):
            for line in block.replace("\\\n", " ").splitlines():
                line = re.sub(r"\s+#.*$", "", line.strip().removeprefix("$ "))
                if m := COMMAND.match(line):
                    found.append((f"{name}: {line}", m[1]))
        for span in re.findall(r"`((?:\.venv/bin/)?lab [^`]+)`", text):
            if not (m := COMMAND.match(span.strip())):
                continue
            rest = m[1]
            words = rest.split()
            name = 2 if words[0] in ("study", "swarm") else 1  # `lab swarm up` is a command's name
            if len(words) <= name or re.search(r"\.\.\.|\[|\|", rest):
                continue  # a command's name, or a template
            found.append((f"{name}: `{span}`", rest))
    return found


def filled(rest: str) -> list[str]:
    """The command with the page's placeholders filled, once per value a placeholder takes."""
    rest = re.sub(r"results/study-replay-<[^>]+>/matrix", str(FIXTURE), rest)  # a lab run's folder too
    rest = re.sub(r"results/(<[^>]+>|\d{8}-\d{6})", str(FIXTURE), rest)
    rest = re.sub(r"\bresults/(before|after)\b", str(FIXTURE), rest)
    rest = re.sub(r"\b(OLD|NEW)\b", str(FIXTURE), rest)  # lab compare's two folders
    rest = rest.replace("CASE", "singleton-cio")
    rest = rest.replace(
        "--report DIR", f"--report {REPO / 'docs' / 'bench-runs' / 'ladder'}"
    )  # a kept bench run
    if "NAME" in rest:
        return [rest.replace("NAME", study) for study in studies.STUDIES]
    return [rest]


COMMANDS = commands()


def test_the_pages_print_commands_at_all():
    assert len(COMMANDS) > 40, COMMANDS
    assert any("lab run" in where for where, _ in COMMANDS) and any("lab study" in w for w, _ in COMMANDS)


def never_built(module, rel, log=None):
    raise AssertionError(f"a dry run built {module} for Ktor {rel.name}: it must build and download nothing")


@pytest.mark.parametrize("where,rest", COMMANDS, ids=[w for w, _ in COMMANDS])
def test_every_command_in_the_readme_and_docs_runs_as_printed(where, rest, capsys, monkeypatch):
    monkeypatch.setattr(versions, "ensure_jar", never_built)
    for text in filled(rest):
        argv = [*shlex.split(text), "--dry-run"]
        try:
            code = cli.main(argv)
        except SystemExit as e:  # argparse refused it
            code = e.code
        out, err = capsys.readouterr()
        assert code == 0, f"{where}\n  lab {' '.join(argv)}\n  {err.strip() or out.strip()}"


def dry_run_minutes(rest: str, capsys) -> int:
    """The time `lab REST --dry-run` gives (its last `about 96m54s`), in whole minutes, half up."""
    capsys.readouterr()
    assert cli.main([*shlex.split(rest), "--dry-run"]) == 0, rest
    minutes, seconds = re.findall(r"about (\d+)m(\d+)s", capsys.readouterr().out)[-1]
    return int(minutes) + (int(seconds) >= 30)


def quoted_times() -> list[tuple[str, str, int]]:
    """(where, the command after `lab `, the minutes the page gives) for each time a page quotes from
    a dry run: the studies index's last column (each study's `lab study NAME`), and a command
    followed on its line or sentence by `at most about N min`."""
    index = REPO / "docs" / "studies" / "README.md"
    found = [
        (f"studies/README.md: {name}", f"study {name}", int(minutes))
        for name, minutes in re.findall(
            r"^\| \[(\w+)\]\(\w+\.md\) \|.*\| (\d+) min \|$", index.read_text(), re.M
        )
    ]
    for page in PAGES:
        text, where = page.read_text(), page.relative_to(REPO)
        for block in re.findall(r"```[a-z]*\n(.*?)```", text, re.S):  # a command line and its comment
            for rest, minutes in re.findall(
                r"^lab (study\b[^#\n]*?)\s+#[^:\n]*:\s*at most about (\d+) min", block, re.M
            ):
                found.append((f"{where}: lab {rest}", rest, int(minutes)))
        prose = " ".join(re.sub(r"```.*?```", "", text, flags=re.S).split())
        for rest, minutes in re.findall(
            r"`lab ((?:study|run|bench)\b[^`]*)`[^.(`]*\(at most about (\d+) min", prose
        ):
            found.append((f"{where}: lab {rest}", rest, int(minutes)))
    return found


def test_a_time_a_page_quotes_from_a_dry_run_is_what_the_dry_run_says(capsys):
    """The studies index's times and every `at most about N min` after a command: a change to the
    plan or the time a window takes (a settle, a warm-up) moves the dry run, and the page with it."""
    quoted = quoted_times()
    assert len(quoted) >= 10, quoted
    bad = [
        f"{where}: the page says {minutes} min, the dry run {says}"
        for where, rest, minutes in quoted
        if (says := dry_run_minutes(rest, capsys)) != minutes
    ]
    assert not bad, "\n".join(bad)
