#!/bin/sh
# The lab's TLS material, made once at first start and never committed: a lab CA (its key
# destroyed as soon as it has signed) and the upstream's certificate, with the names the proxy
# uses (nginx in compose, localhost and 127.0.0.1 natively). Run by the official image at start
# (from /docker-entrypoint.d/) and by the native runner with its own folder. The proxy trusts
# ca.pem alone (UPSTREAM_CA_FILE).
#
# RSA 2048 with SHA-256: Ktor's CIO TLS (1.2 only) signs with neither RSA-PSS nor Ed25519.
set -eu

LAB_TLS_DIR=${LAB_TLS_DIR:-/etc/nginx/lab-tls}
mkdir -p "$LAB_TLS_DIR"
cd "$LAB_TLS_DIR"
if [ -s ca.pem ] && [ -s server.pem ] && [ -s server.key ]; then
    exit 0
fi
umask 077
openssl req -x509 -newkey rsa:2048 -nodes -sha256 -days 825 -subj "/CN=ktor-lab CA" \
    -addext "basicConstraints=critical,CA:TRUE,pathlen:0" -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -keyout ca.key -out ca.pem 2>/dev/null
openssl req -new -newkey rsa:2048 -nodes -sha256 -subj "/CN=nginx" -keyout server.key -out server.csr 2>/dev/null
printf '%s\n' 'basicConstraints=critical,CA:FALSE' 'keyUsage=critical,digitalSignature,keyEncipherment' \
    'extendedKeyUsage=serverAuth' 'subjectAltName=DNS:nginx,DNS:localhost,IP:127.0.0.1' > server.ext
openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 825 -sha256 \
    -extfile server.ext -out server.pem 2>/dev/null
rm -f ca.key ca.srl server.csr server.ext
chmod 644 ca.pem server.pem
# server.key stays 0600: nginx's master reads it as root (in the image), or as the lab's user.
openssl verify -CAfile ca.pem server.pem >/dev/null
echo "lab-tls: made a lab CA and the upstream's certificate in $LAB_TLS_DIR"
