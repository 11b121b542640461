#!/usr/bin/env bash
# A throwaway CA and certificates signed by it, for local HTTPS and mTLS (docs/tls-h2-grpc.md). Never for
# production: the CA key sits next to the certificates.
#
#   bash config/make-certs.sh DIR NAME...          # server certificates, SAN DNS:NAME
#   bash config/make-certs.sh --client DIR NAME... # client certificates (mTLS between regions)
#
# Writes DIR/ca.pem and DIR/ca-key.pem (made once, reused), then DIR/NAME.pem and
# DIR/NAME-key.pem for each NAME. `localhost` also gets IP:127.0.0.1. Keys are ECDSA P-256.
# Needs only the openssl command.
set -euo pipefail

usage='cert'
if [[ "${1:-}" == "--client" ]]; then usage='client'; shift; fi
if (($# < 2)); then
  echo "usage: $0 [--client] DIR NAME..." >&2
  exit 2
fi
dir=$1; shift
mkdir -p "$dir"

if [[ ! -f "$dir/ca.pem" ]]; then
  openssl ecparam -name prime256v1 -genkey -noout -out "$dir/ca-key.pem" 2>/dev/null
  openssl req -x509 -new -key "$dir/ca-key.pem" -sha256 -days 30 \
    -subj "/CN=iuid-router throwaway CA" \
    -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -out "$dir/ca.pem" 2>/dev/null
fi

for name in "$@"; do
  san="DNS:$name"
  [[ "$name" == localhost ]] && san="$san,IP:127.0.0.1"
  if [[ "$usage" == client ]]; then eku=clientAuth; else eku=serverAuth; fi
  openssl ecparam -name prime256v1 -genkey -noout -out "$dir/$name-key.pem.tmp" 2>/dev/null
  # PKCS#8, the form every TLS stack reads.
  openssl pkcs8 -topk8 -nocrypt -in "$dir/$name-key.pem.tmp" -out "$dir/$name-key.pem"
  rm -f "$dir/$name-key.pem.tmp"
  openssl req -new -key "$dir/$name-key.pem" -subj "/CN=$name" -out "$dir/$name.csr" 2>/dev/null
  printf 'subjectAltName=%s\nextendedKeyUsage=%s\nbasicConstraints=CA:FALSE\n' "$san" "$eku" > "$dir/$name.ext"
  openssl x509 -req -in "$dir/$name.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca-key.pem" \
    -CAcreateserial -days 30 -sha256 -extfile "$dir/$name.ext" -out "$dir/$name.pem" 2>/dev/null
  rm -f "$dir/$name.csr" "$dir/$name.ext"
  echo "$dir/$name.pem $dir/$name-key.pem"
done
