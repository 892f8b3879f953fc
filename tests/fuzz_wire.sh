#!/usr/bin/env bash
# Builds the wire decoder's libFuzzer target with clang (-fsanitize=fuzzer,address)
# and runs it for a bounded time; any crash, leak or mismatch fails the test.
#   fuzz_wire.sh SOURCE_DIR WORK_DIR [seconds=30]
set -euo pipefail
src=$1 work=$2 secs=${3:-30}
mkdir -p "$work/corpus"
clang++ -std=c++17 -O1 -g -fsanitize=fuzzer,address -I"$src/core" \
  "$src/core/wire/fuzz_decode.cpp" "$src/core/wire/message.cpp" "$src/core/wire/crc.cpp" \
  -o "$work/fuzz_decode"
# The corpus starts empty: libFuzzer finds the "GW" header by comparison tracing.
"$work/fuzz_decode" -max_total_time="$secs" -max_len=4096 -print_final_stats=1 "$work/corpus" 2>&1 | tail -15
echo "fuzz_wire: no crash in ${secs}s"
