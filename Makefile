# The lab's everyday commands. `make help` lists them.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
MVN := mvn -B -ntp
CASE ?= singleton-cio

.PHONY: help setup build test test-fast run verify matrix bench bench-locust studies lint clean

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

$(VENV)/.installed: runner/pyproject.toml
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e 'runner[test]'
	touch $@

setup: $(VENV)/.installed  ## Python venv with the lab command and test tools

# The same Maven invocation as proxy-app/Dockerfile, so a green build here is a green image build.
build:  ## build proxy-app/target/proxy-app.jar (runs the Kotlin unit tests) and io-bench's JMH jar
	cd proxy-app && $(MVN) package
	cd io-bench && $(MVN) package

test: setup build  ## every test: Kotlin unit tests, then the Python suite with real nginx, proxies, Locust, Prometheus
	$(VENV)/bin/ruff check runner locust
	$(VENV)/bin/pytest runner/tests

test-fast: setup build  ## the suite without the 100 MB transfers and timeout waits
	$(VENV)/bin/pytest runner/tests -m "not slow"

run: setup build  ## nginx, the proxy for CASE (default singleton-cio), Prometheus, Locust UI on 127.0.0.1 until Ctrl-C
	$(VENV)/bin/lab up $(CASE)

verify: setup build  ## start the native stack on free ports, check every endpoint and dashboard query, stop
	$(VENV)/bin/lab verify $(CASE)

matrix: setup build  ## all 10 cases headless (lab run), then report.md and report.html in results/<timestamp>/
	$(VENV)/bin/lab run

bench: setup build  ## wrk: nginx direct, nginx proxy_pass and every case; prints the table
	$(VENV)/bin/lab bench

bench-locust: setup  ## the most rps the lab's Locust makes against nginx: one process, then 2 workers
	$(VENV)/bin/lab bench-locust

studies: setup build  ## every study at full size (docs/studies/), one after another: about 40 min
	$(VENV)/bin/lab study threads
	$(VENV)/bin/lab study replay
	$(VENV)/bin/lab study streaming
	$(VENV)/bin/lab study engines
	$(VENV)/bin/lab study io

lint: setup  ## ruff on the Python code
	$(VENV)/bin/ruff check runner locust
	$(VENV)/bin/ruff format --check runner locust

clean:  ## remove build output and run folders
	rm -rf proxy-app/target io-bench/target runs tools/compose-config/compose-config
