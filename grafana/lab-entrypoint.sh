#!/bin/sh
# Grafana's start in the compose lab and the swarm stack: never admin/admin.
#
# Where the UIs ask for a login (the swarm stack, compose/lan.yml), the admin's password is the
# lab's: LAB_PASSWORD_FILE (the swarm secret) or LAB_PASSWORD, with the admin named lab
# (GF_SECURITY_ADMIN_USER), anonymous access off, and nothing printed. Otherwise (compose on
# loopback) it is GRAFANA_ADMIN_PASSWORD when that is set, else a random one made at the first start
# (while Grafana has no database yet) and printed once, here, in the container's log:
# `docker compose logs grafana | grep password`. Later starts of the same container keep the admin
# Grafana stored then (Grafana reads the setting only when it creates the admin); viewers then need
# no login (grafana.ini). Then the image's own entrypoint runs.
set -eu
db=${GF_PATHS_DATA:-/var/lib/grafana}/grafana.db
user=${GF_SECURITY_ADMIN_USER:-admin}
random_password() {
    tr -dc 'A-Za-z0-9' < /dev/urandom | head -c 24
}
if [ -n "${LAB_PASSWORD_FILE:-}" ]; then
    GF_SECURITY_ADMIN_PASSWORD=$(cat "$LAB_PASSWORD_FILE")
    echo "lab: Grafana's admin: user $user, the lab's password (LAB_PASSWORD_FILE)"
elif [ -n "${LAB_PASSWORD:-}" ]; then
    GF_SECURITY_ADMIN_PASSWORD=$LAB_PASSWORD
    echo "lab: Grafana's admin: user $user, the lab's password (LAB_PASSWORD)"
elif [ -n "${GRAFANA_ADMIN_PASSWORD:-}" ]; then
    GF_SECURITY_ADMIN_PASSWORD=$GRAFANA_ADMIN_PASSWORD
    echo "lab: Grafana admin password: GRAFANA_ADMIN_PASSWORD (user $user)"
elif [ ! -f "$db" ]; then
    GF_SECURITY_ADMIN_PASSWORD=$(random_password)
    echo "lab: Grafana admin password, made at first start (user $user): $GF_SECURITY_ADMIN_PASSWORD"
else
    # The admin exists with the password printed at the first start; this value is not used.
    GF_SECURITY_ADMIN_PASSWORD=$(random_password)
    echo "lab: Grafana admin password: the one printed at this container's first start"
fi
if [ -z "$GF_SECURITY_ADMIN_PASSWORD" ]; then
    echo "lab: Grafana's admin password is blank (LAB_PASSWORD_FILE or LAB_PASSWORD)" >&2
    exit 1
fi
# The lab's password guards every UI: the rule of locust/lab_guard.py's weakness().
if [ -n "${LAB_PASSWORD_FILE:-}${LAB_PASSWORD:-}" ] && { [ "${#GF_SECURITY_ADMIN_PASSWORD}" -lt 12 ] ||
    [ "$(printf %s "$GF_SECURITY_ADMIN_PASSWORD" | fold -w1 | sort -u | wc -l)" -lt 4 ]; }; then
    echo "lab: the lab's password is too weak: use at least 12 characters, not one or two repeated (e.g. openssl rand -base64 18)" >&2
    exit 1
fi
export GF_SECURITY_ADMIN_PASSWORD
exec /run.sh "$@"
