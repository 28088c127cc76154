#!/usr/bin/env bash
# `make fuzz`: each libFuzzer target for FUZZ_SECONDS (default 60), from the committed corpus in fuzz/corpus/<target>.
# New interesting inputs are added to the corpus; crashes land in fuzz/crashes/<target>/ — commit them: `make test`
# replays the corpus and every crash as regression inputs (Tests/IngestTests/FuzzCorpusTests.swift).
# Every parser here reads outside bytes and must be linear (docs/threat-model.md), so an input of up to the relay's
# 64 KiB body cap that takes more than a second is a finding too (-timeout=1; libFuzzer's default is 20 minutes).
# FUZZ_TARGETS="form webhook" runs only those targets.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${FUZZ_SECONDS:-60}
echo "==> building the fuzz targets (-sanitize=fuzzer, .build/fuzz)"
KUMAPUSH_FUZZ=1 swift build -c release --product FuzzTargets --build-path .build/fuzz \
  -Xswiftc -sanitize=fuzzer -Xswiftc -parse-as-library >/dev/null
binary=$(KUMAPUSH_FUZZ=1 swift build -c release --build-path .build/fuzz --show-bin-path)/FuzzTargets
status=0
for target in ${FUZZ_TARGETS:-json tolerant-json form webhook query authorization apns-response}; do
  echo "==> fuzzing $target for ${seconds}s"
  mkdir -p "fuzz/corpus/$target" "fuzz/crashes/$target"
  if ! FUZZ_TARGET=$target "$binary" "fuzz/corpus/$target" -max_total_time="$seconds" -max_len=65536 -timeout=1 \
       -artifact_prefix="fuzz/crashes/$target/" -print_final_stats=1 2>"fuzz/crashes/$target.log"; then
    echo "    $target: crash or timeout, see fuzz/crashes/$target/ and fuzz/crashes/$target.log"
    status=1
  else
    grep -E "stat::number_of_executed_units|cov:" "fuzz/crashes/$target.log" | tail -1 | sed 's/^/    /'
  fi
done
exit $status
