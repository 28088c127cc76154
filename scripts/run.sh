#!/usr/bin/env bash
# `make run`: the relay with its embedded SQLite and, unless real APNs credentials are set, the local APNs
# simulator; then a walk-through to try it. Ctrl-C stops everything.
#
#   scripts/run.sh           run until Ctrl-C
#   scripts/run.sh --check   run the walk-through itself, verify the push arrived, stop (used to test this script)
set -euo pipefail
cd "$(dirname "$0")/.."
binary=${KUMAPUSH_RELAY_BINARY:-.build/release/kumapush-relay}
dev=${DEV_DIR:-.dev}
mkdir -p "$dev"
[ -f "$dev/tls/server.pem" ] || scripts/generate-test-certs.sh "$dev/tls" >/dev/null

port=${PORT:-4321}
sim_port=${SIM_PORT:-8443}
sandbox_port=${SANDBOX_SIM_PORT:-$((sim_port + 1))}
export DATABASE_PATH=${DATABASE_PATH:-$dev/kumapush.db}
export PORT=$port HOST=${HOST:-127.0.0.1}
export METRICS_ADDR=${METRICS_ADDR:-127.0.0.1:9464}

pids=()
stop() {
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap stop EXIT
trap 'exit 0' INT TERM

if [ -n "${APNS_AUTH_KEY_PATH:-}" ] && [ -z "${APNS_URL:-}" ]; then
  echo "==> using Apple's APNs ($([ "${ENV:-}" = development ] && echo sandbox || echo "${APNS_ENVIRONMENT:-production}")) with your key"
else
  export APNS_AUTH_KEY_PATH=$dev/tls/apns-key.p8 APNS_KEY_ID=DEVKEY0001 APNS_TEAM_ID=DEVTEAM001
  export APP_BUNDLE_IDENTIFIER=${APP_BUNDLE_IDENTIFIER:-dev.kumapush.app}
  export APNS_URL=https://127.0.0.1:$sim_port APNS_CA_FILE=$dev/tls/ca.pem
  echo "==> starting the APNs simulator on 127.0.0.1:$sim_port (pushes print below)"
  "$binary" apns-sim --cert "$dev/tls/server.pem" --key "$dev/tls/server.key" --token-key "$dev/tls/apns-key.pub.pem" \
    --listen "127.0.0.1:$sim_port" --topic "$APP_BUNDLE_IDENTIFIER" > >(tee "$dev/pushes.log") 2>"$dev/apns-sim.log" &
  pids+=($!)
  # A second simulator plays Apple's sandbox (TestFlight and Xcode builds), so the relay's sandbox/production
  # handling shows: the production simulator refuses the demo sandbox token as BadDeviceToken, as Apple would.
  export APNS_SANDBOX_URL=https://127.0.0.1:$sandbox_port
  echo "==> starting a sandbox APNs simulator on 127.0.0.1:$sandbox_port"
  "$binary" apns-sim --cert "$dev/tls/server.pem" --key "$dev/tls/server.key" --token-key "$dev/tls/apns-key.pub.pem" \
    --listen "127.0.0.1:$sandbox_port" --topic "$APP_BUNDLE_IDENTIFIER" > >(sed -u 's/^/[sandbox] /' | tee "$dev/sandbox-pushes.log") \
    2>"$dev/apns-sandbox-sim.log" &
  pids+=($!)
  simulated=1
fi

echo "==> starting kumapush-relay serve on http://127.0.0.1:$port (database $DATABASE_PATH, log $dev/relay.log)"
"$binary" serve 2>"$dev/relay.log" &
pids+=($!)
for _ in $(seq 1 100); do
  "$binary" healthcheck >/dev/null 2>&1 && break
  sleep 0.1
done
"$binary" healthcheck || { echo "the relay did not become healthy; see $dev/relay.log"; exit 1; }
if [ -n "${simulated:-}" ]; then
  # A simulator that could not listen (its port taken) has exited by now: say so instead of failing later.
  for log in apns-sim apns-sandbox-sim; do
    grep -q "cannot" "$dev/$log.log" && { echo "a simulator did not start: $(cat "$dev/$log.log")"; exit 1; }
  done
fi

token=$(printf 'ab%.0s' $(seq 1 32))
sandbox_token=$(printf '5a%.0s' $(seq 1 32))
if [ -n "${simulated:-}" ]; then
  for _ in $(seq 1 100); do
    curl -sf --http2 --cacert "$dev/tls/ca.pem" -X POST "https://127.0.0.1:$sim_port/sim/faults" \
      -d "{\"byToken\":{\"$sandbox_token\":{\"status\":400,\"reason\":\"BadDeviceToken\"}}}" >/dev/null 2>&1 && break
    sleep 0.1
  done
fi
# The demo device is registered here, so the walk-through can print its real webhook URL: every command below
# pastes as printed (a placeholder such as <id> would be a shell redirection). Registering the same token again, as
# step 1 does, answers the same id.
id=$(curl -s -X POST "http://127.0.0.1:$port/devices" -H 'Content-Type: application/json' -d "{\"device_token\":\"$token\"}" |
     python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
cat <<TXT

The relay is up. Try it (in another terminal):

  # 1. Register a device, as the iPhone app does (any even-length hex token works with the simulator). The demo
  #    device is registered already: this answers its id, $id, and its webhook URL.
  curl -s -X POST http://127.0.0.1:$port/devices -H 'Content-Type: application/json' \\
       -d '{"device_token":"$token"}'

  # 2. Send an Uptime Kuma alert to that device's webhook URL:
  curl -s -X POST http://127.0.0.1:$port/wh/$id -H 'Content-Type: application/json' \\
       -d '{"heartbeat":{"status":0,"msg":"connect ECONNREFUSED","important":true},"monitor":{"id":1,"name":"Shop API"},"msg":"down"}'

  # 3. Press Uptime Kuma's "Test" button equivalent: it waits for APNs' answer and says {"status":"delivered"}:
  curl -s -X POST http://127.0.0.1:$port/wh/$id -H 'Content-Type: application/json' \\
       -d '{"heartbeat":null,"monitor":null,"msg":"My Webhook Alert (1) Testing"}'

  # 4. A TestFlight build's sandbox token: production refuses it, the relay resends once to the sandbox simulator
  #    (lines marked [sandbox]) and sends the device's next pushes straight there:
  curl -s -X POST http://127.0.0.1:$port/devices -H 'Content-Type: application/json' \\
       -d '{"device_token":"$sandbox_token"}'

  The pushes appear below as the simulator receives them. Queue: $binary stats --database-path $DATABASE_PATH
  Metrics: curl -s http://$METRICS_ADDR/metrics. Ctrl-C stops everything.

TXT

if [ "${1:-}" = "--check" ]; then
  curl -sf -X POST "http://127.0.0.1:$port/wh/$id" -H 'Content-Type: application/json' \
       -d '{"heartbeat":{"status":0,"msg":"connect ECONNREFUSED","important":true},"monitor":{"id":1,"name":"Shop API"},"msg":"down"}'
  echo
  answer=$(curl -s -X POST "http://127.0.0.1:$port/wh/$id" -H 'Content-Type: application/json' \
       -d '{"heartbeat":null,"monitor":null,"msg":"My Webhook Alert (1) Testing"}')
  echo "$answer"
  [ "$answer" = '{"status":"delivered"}' ] || { echo "check failed: the Test push was not delivered"; exit 1; }
  grep -q "Shop API is down" "$dev/pushes.log" || { echo "check failed: the alert did not reach the simulator"; exit 1; }
  if [ -n "${simulated:-}" ]; then
    sandbox_id=$(curl -s -X POST "http://127.0.0.1:$port/devices" -H 'Content-Type: application/json' \
                 -d "{\"device_token\":\"$sandbox_token\"}" | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
    answer=$(curl -s -X POST "http://127.0.0.1:$port/wh/$sandbox_id" -H 'Content-Type: application/json' \
         -d '{"heartbeat":null,"monitor":null,"msg":"From a TestFlight build"}')
    [ "$answer" = '{"status":"delivered"}' ] || { echo "check failed: the sandbox device's push: $answer"; exit 1; }
    grep -q "^\[sandbox\].*200" "$dev/sandbox-pushes.log" || { echo "check failed: nothing reached the sandbox simulator"; exit 1; }
  fi
  echo "check passed: the pushes reached the simulators"
  exit 0
fi
wait
