#!/usr/bin/env bash
# Builds gantry serve's request-parsing libFuzzer target with clang
# (-fsanitize=fuzzer,address: Beast's request parser as the server configures
# it, the query, the .npy and JSON body parsers and their round trips; no
# LibTorch) and runs it for a bounded time; any crash, leak, escaping
# exception or round-trip mismatch fails the test.
#   fuzz_serve.sh SOURCE_DIR WORK_DIR [seconds=30]
set -euo pipefail
src=$1 work=$2 secs=${3:-30}
mkdir -p "$work/corpus"
clang++ -std=c++20 -O1 -g -fsanitize=fuzzer,address -I"$src/core/src" \
  "$src/core/src/serve/fuzz_request.cpp" "$src/core/src/serve/parse.cpp" -o "$work/fuzz_serve"
# A few seeds: a .npy POST, a JSON POST, a GET with a query.
header="{'descr': '<f4', 'fortran_order': False, 'shape': (1, 2), }"
printf 'POST /v1/forward?format=npy HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n\x93NUMPY\x01\x00%b%s\n%b' \
  $((10 + ${#header} + 1 + 8)) "\\x$(printf %02x $((${#header} + 1)))\\x00" "$header" '\x00\x00\x80\x3f\x00\x00\x00\x40' \
  > "$work/corpus/npy"
json='{"input": [[1.5, -2], [3, 4e-3]]}'
printf 'POST /v1/forward HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s' \
  ${#json} "$json" > "$work/corpus/json"
printf '%s' "$json" > "$work/corpus/json_body"
printf '[[0.333333343, 1e-07], [-2.5e+38, 16777217]]' > "$work/corpus/json_floats"
printf 'GET /v1/sample?n=16&seed=%%37&format=png HTTP/1.1\r\nHost: x\r\n\r\n' > "$work/corpus/get"
"$work/fuzz_serve" -max_total_time="$secs" -max_len=4096 -print_final_stats=1 "$work/corpus" 2>&1 | tail -15
echo "fuzz_serve: no crash in ${secs}s"
