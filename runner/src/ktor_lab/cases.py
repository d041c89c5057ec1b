"""The cases under test (`<lifetime>-<engine>`) and the load scenarios, as the lab names them."""

from __future__ import annotations

ENGINES = ("cio", "apache", "apache5", "okhttp", "java")
LIFETIMES = ("singleton", "per-call")
CASES = tuple(f"{lifetime}-{engine}" for lifetime in LIFETIMES for engine in ENGINES)
# The locustfile's --scenario values (a test keeps them equal).
SCENARIOS = ("static-small", "static-large", "upload", "slow", "mix")


def split_case(case: str) -> tuple[str, str]:
    """`per-call-okhttp` -> (`per-call`, `okhttp`); ValueError naming the valid cases otherwise."""
    for lifetime in LIFETIMES:
        engine = case.removeprefix(lifetime + "-")
        if engine != case and engine in ENGINES:
            return lifetime, engine
    raise ValueError(f"unknown case {case!r}; valid cases: {', '.join(CASES)}")


def case_list(text: str) -> list[str]:
    """A comma-separated list of cases, each checked."""
    cases = [c.strip() for c in text.split(",") if c.strip()]
    for case in cases:
        split_case(case)
    return cases
