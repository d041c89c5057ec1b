#!/bin/sh
# Generates the upstream's static files (never committed) and their manifest, and the
# temp folder for upload bodies. Run by the official image at start (from
# /docker-entrypoint.d/) and by the native runner with its own folders.
#
# Content is deterministic: each file is the first SIZE bytes of LINE repeated, so
# tests and Locust know every checksum (they are also in manifest.json).
set -eu

LAB_FILES_DIR=${LAB_FILES_DIR:-/usr/share/nginx/lab}
LAB_TMP_DIR=${LAB_TMP_DIR:-/tmp/nginx-lab}
LAB_LOG_DIR=${LAB_LOG_DIR:-/var/log/nginx/lab}  # connections.log (one line per new connection)
LINE='ktor-lab static payload 0123456789 abcdefghijklmnopqrstuvwxyz.'  # 63 bytes + newline

mkdir -p "$LAB_FILES_DIR" "$LAB_TMP_DIR/body" "$LAB_TMP_DIR/proxy" "$LAB_LOG_DIR"
# Workers run as LAB_WORKER_USER (nginx.conf's "user") when the master is root: they
# write upload bodies here.
LAB_WORKER_USER=${LAB_WORKER_USER:-nginx}
if [ "$(id -u)" = 0 ] && id -u "$LAB_WORKER_USER" >/dev/null 2>&1; then
    chown "$LAB_WORKER_USER" "$LAB_TMP_DIR/body" "$LAB_TMP_DIR/proxy"
fi

printf 'Success!\n' > "$LAB_FILES_DIR/index.txt"
printf 'Success!\n' > "$LAB_FILES_DIR/tiny.txt"

manifest="$LAB_FILES_DIR/manifest.json.tmp"
printf '{' > "$manifest"
sep=''
for spec in 1k:1024 100k:102400 1m:1048576 15m:15728640 100m:104857600; do
    name="${spec%%:*}.bin"
    size="${spec#*:}"
    file="$LAB_FILES_DIR/$name"
    if [ ! -f "$file" ] || [ "$(wc -c < "$file")" -ne "$size" ]; then
        yes "$LINE" | head -c "$size" > "$file.tmp"
        mv "$file.tmp" "$file"
    fi
    sum=$(sha256sum "$file" | cut -d' ' -f1)
    printf '%s\n  "%s": {"bytes": %s, "sha256": "%s"}' "$sep" "$name" "$size" "$sum" >> "$manifest"
    sep=','
done
for name in tiny.txt; do
    sum=$(sha256sum "$LAB_FILES_DIR/$name" | cut -d' ' -f1)
    printf ',\n  "%s": {"bytes": %s, "sha256": "%s"}' "$name" "$(wc -c < "$LAB_FILES_DIR/$name")" "$sum" >> "$manifest"
done
printf '\n}\n' >> "$manifest"
mv "$manifest" "$LAB_FILES_DIR/manifest.json"
chmod -R a+rX "$LAB_FILES_DIR"
echo "40-lab-files.sh: static files ready in $LAB_FILES_DIR"
