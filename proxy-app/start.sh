#!/bin/sh
# The proxy's start in its container: the open-files limit from PROXY_NOFILE, then the JVM.
#
# PROXY_NOFILE is a number or `max` (the default): the container's hard limit, about a million
# on an ordinary Docker host, lower on some (20000 on the lab's build machine). Compose's own
# `ulimits:` cannot do this: it fails on a host whose hard limit is below the value asked for.
set -eu
nofile=${PROXY_NOFILE:-max}
hard=$(ulimit -Hn)
[ "$nofile" = max ] && nofile=$hard
case $nofile in
    '' | *[!0-9]*)
        echo "proxy: configuration error: PROXY_NOFILE='$nofile' is not valid; valid values: max, or a number up to $hard" >&2
        exit 2 ;;
esac
if [ "$nofile" -gt "$hard" ] || ! ulimit -n "$nofile" 2>/dev/null; then
    echo "proxy: configuration error: PROXY_NOFILE=$nofile is above this host's open-files hard limit ($hard); set PROXY_NOFILE=$hard or lower (or max) in .env" >&2
    exit 2
fi
# shellcheck disable=SC2086 # JAVA_OPTS holds several options
exec java $JAVA_OPTS -jar /app/proxy-app.jar
