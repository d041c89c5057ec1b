#!/bin/sh
# The compose lab's UIs ask for no login: on loopback (LAB_BIND, 127.0.0.1 by default) only this
# machine reaches them. Published on any other address, they must ask for one: compose/lan.yml
# gives Locust, Prometheus and Grafana a login and sets LAB_LOGINS=on here. Without it this hook
# stops nginx, which every other service waits for, with one line saying what to do, and nothing
# of the stack starts. Run by the nginx image at start, before the lab's other hooks.
set -eu
bind=${LAB_BIND:-127.0.0.1}
case "$bind" in
    127.*|localhost|::1|"[::1]") exit 0 ;;
esac
if [ "${LAB_LOGINS:-off}" = "on" ]; then
    exit 0
fi
echo "lab: LAB_BIND=$bind is not a loopback address: add -f compose/lan.yml and set LAB_PASSWORD (Locust, Prometheus and Grafana then ask for a login; docs/compose.md), or leave LAB_BIND at 127.0.0.1" >&2
exit 1
