# The lab's everyday commands. `make help` lists them.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
MVN := mvn -B -ntp
CASE ?= singleton-cio
# What the system must have (packages, Go): installed when missing, quick when present.
DEPS := tools/install-deps.sh

# The JVM modules share ./pom.xml (versions, plugins); each jar is rebuilt only when a source
# of its module (or the shared POM) is newer than it. Unit tests run in `make test`.
PROXY_JAR := proxy-app/target/proxy-app.jar
PROXY_SOURCES := pom.xml proxy-app/pom.xml $(shell find proxy-app/src/main proxy-app/src/engines -type f 2>/dev/null)
# The benchmark-only modules stand together in bench/ (runner/src/ktor_lab/paths.py: MODULE_FOLDERS).
PLAIN_SOURCES := bench/plain-client/pom.xml $(shell find bench/plain-client/src/main bench/plain-client/src/engines -type f 2>/dev/null)
ENGINEBENCH_JAR := bench/engine-bench/target/engine-bench.jar
ENGINEBENCH_SOURCES := $(PROXY_SOURCES) $(PLAIN_SOURCES) bench/engine-bench/pom.xml $(shell find bench/engine-bench/src/main bench/engine-bench/src/lab -type f 2>/dev/null)
LEAN_JAR := bench/lean-proxy/target/lean-proxy.jar
LEAN_SOURCES := $(PROXY_SOURCES) $(PLAIN_SOURCES) bench/lean-proxy/pom.xml $(shell find bench/lean-proxy/src/main -type f 2>/dev/null)
IOBENCH_JAR := bench/io-bench/target/benchmarks.jar
IOBENCH_SOURCES := pom.xml bench/io-bench/pom.xml $(shell find bench/io-bench/src -type f 2>/dev/null)
# The unit tier, its compiled modules (pytest's rewritten tests among them) kept in the venv even
# where PYTHONDONTWRITEBYTECODE is set: compiling them again took 2 s of each run's 20.
UNIT_TIER := env -u PYTHONDONTWRITEBYTECODE PYTHONPYCACHEPREFIX=$(abspath $(VENV))/pycache $(VENV)/bin/pytest -n auto runner/tests/unit

.PHONY: help deps-run deps-test setup build test test-unit test-fast test-busy test-cuts run verify matrix bench bench-locust studies lint clean

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

# The system's packages (and Go for the tests): the script only looks when they are there.
deps-run:
	@$(DEPS) run

deps-test:
	@$(DEPS) test

$(VENV)/.installed: runner/pyproject.toml locust/pyproject.toml toxiproxy/pyproject.toml
	@$(DEPS) venv
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e 'runner[test]' -e locust -e toxiproxy
	touch $@

setup: $(VENV)/.installed  ## Python venv with the lab command (.venv/bin/lab) and test tools

$(PROXY_JAR): $(PROXY_SOURCES)
	$(MVN) -q -pl proxy-app package -DskipTests
	touch $@

$(ENGINEBENCH_JAR): $(ENGINEBENCH_SOURCES)
	$(MVN) -q -pl bench/engine-bench -am package -DskipTests
	touch $@ $(PROXY_JAR)

$(LEAN_JAR): $(LEAN_SOURCES)
	$(MVN) -q -pl bench/lean-proxy -am package -DskipTests
	touch $@ $(PROXY_JAR)

$(IOBENCH_JAR): $(IOBENCH_SOURCES)
	$(MVN) -q -pl bench/io-bench package
	touch $@

build: deps-run $(PROXY_JAR) $(ENGINEBENCH_JAR) $(LEAN_JAR) $(IOBENCH_JAR)  ## the proxy, the minimal reference proxy and the benchmark jars, when their sources changed

# Every test, 32-35 min on 2 cores (docs/testing.md): what it needs is installed first.
test: deps-test setup  ## every test: installs what is missing, the unit tier, Kotlin's tests, then the Python suite with real parts
	$(UNIT_TIER)
	$(MVN) package
	touch $(PROXY_JAR) $(ENGINEBENCH_JAR) $(LEAN_JAR) $(IOBENCH_JAR)
	$(VENV)/bin/ruff check runner locust
	$(VENV)/bin/pytest runner/tests --ignore=runner/tests/unit --durations=40

test-unit: setup  ## the unit tier: no nginx, Java or Locust, about 20 s
	$(UNIT_TIER)

test-fast: deps-test setup $(PROXY_JAR)  ## the suite without the slow tests and containers
	$(VENV)/bin/pytest runner/tests -m "not slow and not compose"

test-busy: deps-test setup  ## the whole suite while a busy loop runs on every core: no assertion may depend on the machine's speed
	$(MVN) package
	touch $(PROXY_JAR) $(ENGINEBENCH_JAR) $(LEAN_JAR) $(IOBENCH_JAR)
	$(VENV)/bin/pytest runner/tests --busy-cores $$(nproc)

test-cuts: deps-test setup $(PROXY_JAR)  ## the race tier: cut bodies with 300 tries per case, direction and machine state (30 in make test), six in flight; whole 100 MB uploads with every core busy, 30 per case (5 in make test)
	$(VENV)/bin/pytest runner/tests/test_cut_bodies.py --cut-tries 300
	$(VENV)/bin/pytest runner/tests/test_proxy_cases.py -k 100mb_uploads --whole-tries 30

run: deps-run setup $(PROXY_JAR)  ## installs what is missing; nginx, the proxy for CASE (default singleton-cio), Prometheus, Locust UI on 127.0.0.1 until Ctrl-C
	$(VENV)/bin/lab up "$(CASE)"

verify: deps-run setup $(PROXY_JAR)  ## start the native stack on free ports, check every endpoint and dashboard query, stop
	$(VENV)/bin/lab verify $(CASE)

matrix: deps-run setup $(PROXY_JAR)  ## the 8 current cases and an A/A pair headless, 2 JVMs a row warmed once, 3 windows each at 400 rps (lab run), report.md and report.html in results/<timestamp>/
	$(VENV)/bin/lab run

bench: deps-run setup $(PROXY_JAR) $(LEAN_JAR)  ## wrk: nginx direct, nginx proxy_pass, every case and the minimal proxy per engine (whole and streamed)
	$(VENV)/bin/lab bench

bench-locust: deps-run setup  ## the most rps the lab's Locust makes against nginx: one process, then 2 workers
	$(VENV)/bin/lab bench-locust

studies: deps-run setup build  ## the studies with runners of their own (threads, streaming, engines, io, faults) at full size, one after another: about 2 h; the studies made of lab run parts run on their own (docs/studies/)
	$(VENV)/bin/lab study threads
	$(VENV)/bin/lab study streaming
	$(VENV)/bin/lab study engines
	$(VENV)/bin/lab study io
	$(VENV)/bin/lab study faults

lint: setup  ## ruff on the Python code
	$(VENV)/bin/ruff check runner locust
	$(VENV)/bin/ruff format --check runner locust

clean:  ## remove build output, run folders and the generated static files
	rm -rf proxy-app/target bench/plain-client/target bench/engine-bench/target bench/lean-proxy/target bench/io-bench/target runs .cache tools/compose-config/compose-config
