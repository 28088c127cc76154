#!/usr/bin/env bash
# Creates .venv with the Python test tools (pytest; h2 and cryptography for the independent APNs fake), and
# reinstalls only when Tests/requirements.txt changes.
set -euo pipefail
cd "$(dirname "$0")/.."

# Extra requirement files (bench/requirements.txt) are installed on top of the test tools.
requirements=Tests/requirements.txt
extra=${1:-}
stamp=.venv/.requirements${extra:+-$(basename "$(dirname "$extra")")}.sha256
wanted=$(cat "$requirements" ${extra:+"$extra"} | sha256sum | cut -d' ' -f1)

if [ -x .venv/bin/python ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$wanted" ]; then
  exit 0
fi

if ! python3 -m venv --help >/dev/null 2>&1; then
  echo "==> installing python3-venv"
  sudo=""; if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends python3-venv >/dev/null
fi

echo "==> preparing .venv ($requirements${extra:+ + $extra})"
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/pip install --quiet --disable-pip-version-check -r "$requirements" ${extra:+-r "$extra"}
echo "$wanted" > "$stamp"
