#!/bin/sh
# The gate's start (prometheus/gate/nginx.conf): the file of logins nginx checks, from the lab's
# password (LAB_PASSWORD_FILE, the swarm secret's path; else LAB_PASSWORD, compose/lan.yml's), then
# nginx. The password is kept as {PLAIN}: the file lives in this container only, beside the secret
# it is read from, so a hash would hide nothing that the secret does not already show.
set -eu
if [ -n "${LAB_PASSWORD_FILE:-}" ]; then
    password=$(cat "$LAB_PASSWORD_FILE")
else
    password=${LAB_PASSWORD:-}
fi
case "$password" in
    "" | *"
"*)
        echo "lab: the Prometheus gate needs the lab's password on one line (LAB_PASSWORD_FILE or LAB_PASSWORD)" >&2
        exit 1
        ;;
esac
# The rule of locust/lab_guard.py's weakness(): Locust refuses the same password.
if [ "${#password}" -lt 12 ] || [ "$(printf %s "$password" | fold -w1 | sort -u | wc -l)" -lt 4 ]; then
    echo "lab: the lab's password is too weak: use at least 12 characters, not one or two repeated (e.g. openssl rand -base64 18)" >&2
    exit 1
fi
mkdir -p /tmp/lab-gate
umask 027
printf 'lab:{PLAIN}%s\n' "$password" > /tmp/lab-gate/users
chgrp nginx /tmp/lab-gate/users
echo "lab: Prometheus asks for a login here: user lab, the lab's password"
exec nginx -c /etc/nginx/lab-gate.conf -g 'daemon off;'
