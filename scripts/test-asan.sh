#!/usr/bin/env bash
# `make test-asan`: the relay built with AddressSanitizer (.build-asan), run through the end-to-end tests whose paths
# touch the most C memory — HTTP/2 transport faults (GOAWAY with streams above its last stream id, the recycle after
# ExpiredProviderToken, a server that allows one stream, connections reset while the relay writes), the hostile-APNs
# and delivery tests, and the resource tests — then the in-process HTTP/2 and delivery tests built the same way (a
# write failing mid-flush, GOAWAY, REFUSED_STREAM, a stream limit of 1, a simulated day of timers). Any
# AddressSanitizer report fails the run, also one from a process the tests had already stopped or expected to exit.
set -euo pipefail
cd "$(dirname "$0")/.."
build=(swift build -c debug --build-path .build-asan -Xswiftc -sanitize=address)
echo "==> building kumapush-relay with -sanitize=address (.build-asan)"
"${build[@]}" --product kumapush-relay
binary="$("${build[@]}" --show-bin-path)/kumapush-relay"
reports="$PWD/.build-asan/reports"
rm -rf "$reports"
mkdir -p "$reports"
# The tests start the relay with a clean environment (Tests/e2e/relayproc.py), so ASAN_OPTIONS travels in a wrapper.
# Leak checks are off: the tests stop most processes with SIGKILL, where no leak check runs anyway; memory over
# time is what test_resources.py and `make bench` measure.
wrapper="$PWD/.build-asan/kumapush-relay-asan"
cat >"$wrapper" <<EOF
#!/bin/sh
ASAN_OPTIONS="log_path=$reports/asan:detect_leaks=0:abort_on_error=1:detect_stack_use_after_return=0" exec "$binary" "\$@"
EOF
chmod +x "$wrapper"
status=0
# Not the RSS-over-100,000-requests test: ASan keeps freed memory in quarantine on purpose, so its resident size
# measures ASan, not the relay (the plain `make test` runs it).
KUMAPUSH_RELAY_BINARY="$wrapper" .venv/bin/pytest -v Tests/e2e/test_transport_faults.py Tests/e2e/test_delivery.py \
  Tests/e2e/test_resources.py -k "not memory_stay_flat" || status=$?
echo "==> HTTP2Tests and DeliverTests with -sanitize=address"
"${build[@]}" --build-tests
ASAN_OPTIONS="log_path=$reports/asan:detect_leaks=0:abort_on_error=1:detect_stack_use_after_return=0" \
  swift test -c debug --build-path .build-asan -Xswiftc -sanitize=address --skip-build \
  --filter 'HTTP2Tests|DeliverTests' || status=$?
if compgen -G "$reports/asan.*" >/dev/null; then
  cat "$reports"/asan.*
  echo "==> AddressSanitizer reported the errors above"
  exit 1
fi
echo "==> AddressSanitizer: no reports"
exit $status
