#!/usr/bin/env bash
# `make run`. The relay's `serve` and the APNs simulator land with issues #3–#5; until then this shows the
# built binary and what it links, and the queue's stats on the development database.
set -euo pipefail
cd "$(dirname "$0")/.."
binary=.build/release/kumapush-relay
mkdir -p .dev
"$binary" version
echo
echo "Database .dev/kumapush.db:"
"$binary" stats --database-path .dev/kumapush.db
echo
echo "serve is not built yet (issues #3 and #4); this target will start it next to the APNs simulator."
