#!/bin/bash
# The rebuild time of an out-of-tree plugin after a one-line edit, against the
# installed SDK, Debug and Release (docs/plugins.md, "Rebuild time"):
#   bench/plugin_rebuild.sh [BUILD_DIR]     (default: build; installs it to a temporary prefix)
# Prints one line per build: the first (with the precompiled <torch/torch.h>), then three rebuilds.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" > /dev/null
cp -r "$root/docs/examples/cgan" "$work/src"
torch_dir=$(grep '^Torch_DIR:' "$build/CMakeCache.txt" | cut -d= -f2)
now() { date +%s.%N; }
printf '%-8s %-28s %8s\n' build what seconds
for type in Debug Release; do
  cmake -S "$work/src" -B "$work/$type" -G Ninja -DCMAKE_BUILD_TYPE=$type -DCMAKE_PREFIX_PATH="$work/prefix" \
    -DTorch_DIR="$torch_dir" > /dev/null
  s=$(now); cmake --build "$work/$type" > /dev/null; e=$(now)
  printf '%-8s %-28s %8.1f\n' $type "first build" "$(echo "$e - $s" | bc)"
  for i in 1 2 3; do
    sed -i "s/lr_(p.get(\"lr\", 2e-4[^)]*))/lr_(p.get(\"lr\", 2e-4 + $i * 0))/" "$work/src/cgan.cpp"
    s=$(now); cmake --build "$work/$type" > /dev/null; e=$(now)
    printf '%-8s %-28s %8.1f\n' $type "rebuild after a one-line edit" "$(echo "$e - $s" | bc)"
  done
done
