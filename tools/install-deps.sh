#!/usr/bin/env bash
# What the lab needs from the system, installed when missing: `make run`, `make test` and .ci/run
# call this. Quick when everything is there (it only looks); otherwise it says what it installs
# and installs it with apt-get, with no service started by the install. Where it cannot install
# (another OS than Debian or Ubuntu, or neither root nor sudo), it prints one line naming what to
# install and exits 1.
#
#   tools/install-deps.sh venv   Python 3.11+ with venv (make setup)
#   tools/install-deps.sh run    and nginx with njs, Prometheus, the nginx exporter, JDK 17, Maven, wrk
#   tools/install-deps.sh test   and Chromium (the page tests), a JDK 25 where the system's packages
#                                have one, and Go 1.24+ (tools/compose-config):
#                                the one on PATH, else tools/fetch-go.py downloads the pinned one
set -euo pipefail
what=${1:-test}
case $what in venv | run | test) ;; *) echo "usage: $0 venv|run|test" >&2; exit 2 ;; esac

need=()
python3 -c 'import sys; assert sys.version_info >= (3, 11)' 2>/dev/null || need+=(python3)
python3 -c 'import venv, ensurepip' 2>/dev/null || need+=(python3-venv)
if [ "$what" != venv ]; then
    command -v nginx >/dev/null || need+=(nginx-light)
    [ -e /usr/share/nginx/modules/ngx_http_js_module.so ] || need+=(libnginx-mod-http-js)
    command -v prometheus >/dev/null || need+=(prometheus)
    command -v prometheus-nginx-exporter >/dev/null || need+=(prometheus-nginx-exporter)
    command -v javac >/dev/null || need+=(openjdk-17-jdk-headless)
    command -v mvn >/dev/null || need+=(maven)
    command -v wrk >/dev/null || need+=(wrk)
fi
if [ "$what" = test ]; then
    command -v chromium >/dev/null || need+=(chromium)
    # A second JDK for `lab run --java 17,25` and its test: where the system's packages have one
    # (Debian trixie and later) and /usr/lib/jvm has none; bookworm has no JDK 25 package.
    if ! ls -d /usr/lib/jvm/*25* >/dev/null 2>&1 \
        && apt-cache show openjdk-25-jdk-headless >/dev/null 2>&1; then
        need+=(openjdk-25-jdk-headless)
    fi
fi

cannot() {
    echo "install-deps: cannot install here ($1); install: $2" >&2
    exit 1
}

if [ ${#need[@]} -gt 0 ]; then
    . "${OS_RELEASE:-/etc/os-release}" 2>/dev/null || true  # OS_RELEASE: another file, for its test
    case " ${ID:-} ${ID_LIKE:-} " in
        *" debian "* | *" ubuntu "*) ;;
        *) cannot "not Debian or Ubuntu" "${need[*]}" ;;
    esac
    SUDO=""
    if [ "$(id -u)" != 0 ]; then
        if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
            SUDO="sudo"
        else
            cannot "neither root nor sudo" "sudo apt-get install ${need[*]}"
        fi
    fi
    echo "install-deps: installing ${need[*]} (apt-get; no service is started)"
    export DEBIAN_FRONTEND=noninteractive
    # A package's install must not start its service (nginx, Prometheus, the exporter): a
    # policy-rc.d forbids it for the length of the install, unless the machine has one.
    policy=""
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        policy=/usr/sbin/policy-rc.d
        printf '#!/bin/sh\n# ktor-lab tools/install-deps.sh: no service starts during its package install\nexit 101\n' \
            | $SUDO tee "$policy" >/dev/null
        $SUDO chmod 755 "$policy"
    fi
    status=0
    { $SUDO apt-get update -qq && $SUDO apt-get install -y -qq "${need[@]}" >/dev/null; } || status=$?
    [ -z "$policy" ] || $SUDO rm -f "$policy"
    [ "$status" = 0 ] || { echo "install-deps: apt-get failed ($status) installing ${need[*]}" >&2; exit "$status"; }
fi

# Go: Debian's golang-go (1.19) is too old for tools/compose-config, so it is not apt's to give.
# tools/fetch-go.py takes the one on PATH when it is 1.24+, else the lab's pinned release from the
# Go module proxy into ~/.cache/ktor-lab (checked against its SHA-256; no root needed).
if [ "$what" = test ]; then
    python3 "$(dirname "$0")/fetch-go.py" >/dev/null
fi
