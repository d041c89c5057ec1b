"""The proxy's house rules, read from its Kotlin sources (`package` lines, `import lab.proxy...`
lines, and fully qualified `lab.proxy.<package>.` names in code): each package has one concern,
data flows one way, and no package imports one that imports it back.

The packages, top to bottom (Application.kt, the table of contents, lists them; docs/README.md
says what each holds). A package imports only packages below it:
lab.proxy (Application.kt) > relay > metrics > server > client.engines > client > config.
The engines' setups (`lab.proxy.client.engines`, one source root per engine) are found by class
name, never imported.
"""

from __future__ import annotations

import re
from pathlib import Path

from ktor_lab.paths import PROXY_DIR

ORDER = (
    "lab.proxy",
    "lab.proxy.relay",
    "lab.proxy.metrics",
    "lab.proxy.server",
    "lab.proxy.client.engines",
    "lab.proxy.client",
    "lab.proxy.config",
)
ENGINES = "lab.proxy.client.engines"


def source_roots(proxy: Path = PROXY_DIR) -> list[Path]:
    """The jar's sources: src/main/kotlin and each engine's src/engines/<engine>/kotlin."""
    return [proxy / "src" / "main" / "kotlin", *sorted((proxy / "src" / "engines").glob("*/kotlin"))]


def code(text: str) -> str:
    """`text` without comments and string literals (a KDoc link or a logger's name is no import)."""
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    return re.sub(r'"(?:\\.|[^"\\\n])*"', '""', text)


def package_of(text: str) -> str:
    m = re.search(r"^package\s+([\w.]+)", text, re.M)
    assert m, "a Kotlin file without a package line"
    return m[1]


def graph(proxy: Path = PROXY_DIR) -> dict[str, set[str]]:
    """Each package of the proxy -> the proxy's packages it names (imports and qualified names)."""
    files = {p: p.read_text() for root in source_roots(proxy) for p in root.rglob("*.kt")}
    packages = {package_of(t) for t in files.values()}
    g: dict[str, set[str]] = {pkg: set() for pkg in packages}

    def owner(name: str) -> str | None:
        """The longest package of the proxy that `name` (a class, a function or a package) is in."""
        parts = name.split(".")
        for n in range(len(parts), 1, -1):
            if ".".join(parts[:n]) in packages:
                return ".".join(parts[:n])
        return None

    for text in files.values():
        here = package_of(text)
        body = re.sub(r"^package\s[^\n]*", "", code(text), flags=re.M)
        for name in re.findall(r"\blab\.proxy(?:\.\w+)*", body):
            target = owner(name.removesuffix(".*"))
            if target and target != here:
                g[here].add(target)
    return g


def cycles(g: dict[str, set[str]]) -> list[str]:
    found = []

    def visit(node: str, path: list[str]) -> None:
        for nxt in sorted(g.get(node, ())):
            if nxt in path:
                found.append(" -> ".join([*path[path.index(nxt) :], nxt]))
            elif nxt not in done:
                visit(nxt, [*path, nxt])
        done.add(node)

    done: set[str] = set()
    for start in sorted(g):
        if start not in done:
            visit(start, [start])
    return sorted(set(found))


def test_no_proxy_package_imports_one_that_imports_it_back():
    found = cycles(graph())
    assert not found, "\n".join(found)


def test_every_package_has_a_place_and_imports_only_those_below_it():
    g = graph()
    assert set(g) == set(ORDER), (
        f"packages without a place in ORDER (and Application.kt's list): {set(g) - set(ORDER)}"
    )
    wrong = [
        f"{pkg} imports {target}, which is above it"
        for pkg, targets in g.items()
        for target in targets
        if ORDER.index(target) < ORDER.index(pkg)
    ]
    assert not wrong, "\n".join(sorted(wrong))


def test_the_engines_are_found_by_name_in_their_own_package():
    """No package imports the engines' setups (a build without one would not compile); the name
    EngineSetup.of looks a setup up by is the package every engine's file declares, at its path."""
    g = graph()
    assert not [pkg for pkg, targets in g.items() if ENGINES in targets]
    setup = (
        PROXY_DIR / "src" / "main" / "kotlin" / "lab" / "proxy" / "client" / "EngineSetup.kt"
    ).read_text()
    assert f'Class.forName("{ENGINES}.${{engine.setupName}}")' in setup
    for root in source_roots()[1:]:
        files = list(root.rglob("*.kt"))
        assert files, root
        for path in files:
            assert package_of(path.read_text()) == ENGINES, path
            assert path.parent.relative_to(root).as_posix() == ENGINES.replace(".", "/"), path


def test_each_file_sits_in_its_package_s_folder():
    for root in [*source_roots(), PROXY_DIR / "src" / "test" / "kotlin"]:
        for path in root.rglob("*.kt"):
            folder = path.parent.relative_to(root).as_posix().replace("/", ".")
            assert package_of(path.read_text()) == folder, path


def test_the_check_sees_imports_and_qualified_names_and_fails_on_a_cycle(tmp_path):
    g = graph()
    assert {"lab.proxy.metrics", "lab.proxy.server", "lab.proxy.client"} <= g["lab.proxy.relay"]
    assert g[ENGINES] == {"lab.proxy.client", "lab.proxy.config"}

    # Two packages that name each other, one by an import, one by a qualified name in code (a
    # comment's or a string's does not count).
    main = tmp_path / "src" / "main" / "kotlin" / "lab" / "proxy"
    (main / "a").mkdir(parents=True)
    (main / "b").mkdir()
    (tmp_path / "src" / "engines").mkdir()
    (main / "a" / "A.kt").write_text(
        "package lab.proxy.a\n\nimport lab.proxy.b.B\n\nobject A { val b = B }\n"
    )
    (main / "b" / "B.kt").write_text(
        "/** See [lab.proxy.c.C]. */\npackage lab.proxy.b\n\n"
        'object B { val log = "lab.proxy.c"\n  fun a() = lab.proxy.a.A }\n'
    )
    (main / "c").mkdir()
    (main / "c" / "C.kt").write_text("package lab.proxy.c\n\nobject C\n")
    fake = graph(tmp_path)
    assert fake == {"lab.proxy.a": {"lab.proxy.b"}, "lab.proxy.b": {"lab.proxy.a"}, "lab.proxy.c": set()}
    assert cycles(fake) == ["lab.proxy.a -> lab.proxy.b -> lab.proxy.a"]
