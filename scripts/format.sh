#!/usr/bin/env bash
# Formats gantry's C++ sources with .clang-format (Debian 12's clang-format 14).
#   scripts/format.sh           rewrite every file in place
#   scripts/format.sh --check   change nothing; list each file it would change, exit 1 if any
# Not formatted: tests/sdk_1_0/ (the frozen SDK 1.0 headers, never edited) and
# core/compat/ (a stand-in of a LibTorch header, kept as LibTorch writes it).
set -euo pipefail
cd "$(dirname "$0")/.."
fmt=$(command -v clang-format-14 || command -v clang-format || true)
if [[ -z "$fmt" ]]; then
  echo "format.sh: clang-format is not installed (apt-get install clang-format; scripts/setup.sh does)" >&2
  exit 2
fi
mapfile -t files < <(find core runner gui plugins tests bench cmake \
  \( -path tests/sdk_1_0 -o -path core/compat \) -prune -o \
  -type f \( -name '*.cpp' -o -name '*.hpp' -o -name '*.h' -o -name '*.cu' \) -print | sort)
if [[ "${1:-}" == --check ]]; then
  bad=()
  for f in "${files[@]}"; do
    "$fmt" --dry-run --Werror "$f" >/dev/null 2>&1 || bad+=("$f")
  done
  if ((${#bad[@]})); then
    echo "format.sh: ${#bad[@]} file(s) not formatted as .clang-format says ($($fmt --version | head -1)):" >&2
    printf '  %s\n' "${bad[@]}" >&2
    echo "format.sh: run scripts/format.sh to format them" >&2
    exit 1
  fi
  echo "format.sh: ${#files[@]} files formatted as .clang-format says"
else
  "$fmt" -i "${files[@]}"
  echo "format.sh: formatted ${#files[@]} files"
fi
