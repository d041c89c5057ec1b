#!/bin/sh
# Grafana's start in the compose lab: never admin/admin.
#
# The admin password is GRAFANA_ADMIN_PASSWORD when it is set. Otherwise a random one is made
# at the first start (while Grafana has no database yet) and printed once, here, in the
# container's log: `docker compose logs grafana | grep password`. Later starts of the same
# container keep the admin Grafana stored then (Grafana reads the setting only when it creates
# the admin). Viewers need no login (grafana.ini). Then the image's own entrypoint runs.
set -eu
db=${GF_PATHS_DATA:-/var/lib/grafana}/grafana.db
random_password() {
    tr -dc 'A-Za-z0-9' < /dev/urandom | head -c 24
}
if [ -n "${GRAFANA_ADMIN_PASSWORD:-}" ]; then
    GF_SECURITY_ADMIN_PASSWORD=$GRAFANA_ADMIN_PASSWORD
    echo "lab: Grafana admin password: GRAFANA_ADMIN_PASSWORD (user admin)"
elif [ ! -f "$db" ]; then
    GF_SECURITY_ADMIN_PASSWORD=$(random_password)
    echo "lab: Grafana admin password, made at first start (user admin): $GF_SECURITY_ADMIN_PASSWORD"
else
    # The admin exists with the password printed at the first start; this value is not used.
    GF_SECURITY_ADMIN_PASSWORD=$(random_password)
    echo "lab: Grafana admin password: the one printed at this container's first start"
fi
export GF_SECURITY_ADMIN_PASSWORD
exec /run.sh "$@"
