#!/usr/bin/env bash
# Installs the Debian packages the build, the tests and `make run` need — only those missing, so it is quick and
# safe to run every time. Swift itself comes with the machine (/opt/swift); everything else comes from here.
set -euo pipefail

packages=(
  pkg-config
  libsqlite3-dev      # Queue: the SQLite store
  libssl-dev          # Common/Deliver: SHA-256, CSPRNG, TLS, ES256
  libmicrohttpd-dev   # Ingest: the HTTP/1.1 server
  libnghttp2-dev      # Deliver: HTTP/2 framing
  libpq-dev           # Queue: the PostgreSQL store (libpq)
  libsystemd-dev      # Systemd: socket activation and sd_notify (libsystemd0 is on every systemd host)
  postgresql          # tests: a throwaway PostgreSQL server per test run (never started as a service by us)
  openssl             # make run: throwaway CA, certificates and signing key
  curl                # make run walk-through, healthchecks in scripts
  systemd             # systemd-analyze verify of deploy/systemd in the tests
  nodejs              # Tests/e2e/uptime_kuma_client.js: webhooks sent exactly as Uptime Kuma sends them,
  node-axios          #   with its real HTTP client (NODE_PATH=/usr/share/nodejs)
  node-form-data      #   and its multipart encoder
)

# `install-deps.sh bench` adds what `make bench` measures against.
if [ "${1:-}" = "bench" ]; then
  packages+=(nginx-light wrk nghttp2-client)
fi

missing=()
for package in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$package")
  fi
done

if ((${#missing[@]} == 0)); then
  exit 0
fi

echo "==> installing Debian packages: ${missing[*]}"
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
