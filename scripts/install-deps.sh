#!/usr/bin/env bash
# Installs the Debian packages a make target needs — only those missing, so it is quick and safe to run every
# time. Swift itself comes with the machine (/opt/swift, README "Requirements"); everything else comes from here.
#
#   scripts/install-deps.sh run       building and `make run`: compilers' libraries, openssl, curl — no database server
#   scripts/install-deps.sh package   `make deb`/`make dist`: the above plus dpkg-dev and lintian
#   scripts/install-deps.sh           `make test`: everything above plus what the tests run against
#   scripts/install-deps.sh bench     `make bench`: the tests' list plus what the benchmarks measure against
#   scripts/install-deps.sh --list MODE   print MODE's packages, one a line, and install nothing
set -euo pipefail

list_only=""
if [ "${1:-}" = "--list" ]; then
  list_only=1
  shift
fi
mode=${1:-test}

run_packages=(
  pkg-config
  libsqlite3-dev      # Queue: the SQLite store
  libssl-dev          # Common/Deliver: SHA-256, CSPRNG, TLS, ES256
  libmicrohttpd-dev   # Ingest: the HTTP/1.1 server
  libnghttp2-dev      # Deliver: HTTP/2 framing
  libpq-dev           # Queue: the PostgreSQL store (libpq, the client library only)
  libsystemd-dev      # socket activation and sd_notify (libsystemd0 is on every systemd host)
  libjemalloc-dev     # the binary's malloc (Sources/Allocator)
  openssl             # make run: throwaway CA, certificates and signing key
  curl                # make run walk-through, healthchecks in scripts
)
package_packages=(
  dpkg-dev            # make deb: dpkg-shlibdeps computes the package's Depends
  lintian             # make deb: the package is checked, any warning fails
  adduser             # the package's postinst creates the kumapush user with it
)
test_packages=(
  postgresql          # tests: a throwaway PostgreSQL server per test run (never started as a service by us)
  etcd-server         # the failover drill (Tests/e2e/test_failover_drill.py): Patroni's DCS, one node on 127.0.0.1
  patroni             #   two PostgreSQL nodes under Patroni 3 (brings python3-etcd)
  iptables            #   the silent loss of a host: its packets dropped on the loopback
  systemd             # systemd-analyze verify of deploy/systemd in the tests
  nodejs              # Tests/e2e/uptime_kuma_client.js: webhooks sent exactly as Uptime Kuma sends them,
  node-axios          #   with its real HTTP client (NODE_PATH=/usr/share/nodejs)
  node-form-data      #   and its multipart encoder
  prometheus          # promtool: `check metrics` on each process's /metrics, `test rules` on deploy/prometheus
  caddy               # deploy/Caddyfile is run in front of the relay to check what it logs
  sqlite3             # docs/operations.md's backup commands, run as written by the package test
)
bench_packages=(nginx-light wrk nghttp2-client)

case "$mode" in
  run) packages=("${run_packages[@]}") ;;
  package) packages=("${run_packages[@]}" "${package_packages[@]}") ;;
  test) packages=("${run_packages[@]}" "${package_packages[@]}" "${test_packages[@]}") ;;
  bench) packages=("${run_packages[@]}" "${package_packages[@]}" "${test_packages[@]}" "${bench_packages[@]}") ;;
  *) echo "usage: $0 [--list] [run|package|test|bench]" >&2; exit 2 ;;
esac

if [ -n "$list_only" ]; then
  printf '%s\n' "${packages[@]}"
  exit 0
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
# Only their binaries are wanted (promtool, caddy): Debian enables and starts the services these packages ship (a
# Prometheus on :9090, a Caddy on :80) on a host running systemd. Stop and disable those this run installed.
if [ -d /run/systemd/system ]; then
  for service in prometheus caddy; do
    if printf '%s\n' "${missing[@]}" | grep -qx "$service"; then $sudo systemctl disable --now "$service" >/dev/null 2>&1 || true; fi
  done
fi
