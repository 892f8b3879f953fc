#!/usr/bin/env bash
# A plugin built by the other supported LibTorch (Debian's 1.13 build, made
# first by scripts/test.sh) is refused by this runner (2.x) with one line
# naming both versions, before anything of it runs; this build's own plugin
# of the same source is accepted.
#   other_libtorch_test.sh GANTRY CONFIG OTHER_PLUGIN OWN_VERSION
set -euo pipefail
gantry=$1 config=$2 other=$3 own=$4
[[ -f $other ]] || { echo "FAIL: $other is missing: build the dev preset first (scripts/test.sh does)"; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
set +e
"$gantry" validate "$config" "system.plugin=$other" >out 2>err
rc=$?
set -e
cat err
[[ $rc == 1 ]] || { echo "FAIL: exit $rc, expected 1"; exit 1; }
[[ $(grep -c . err) == 1 ]] || { echo "FAIL: expected one error line"; exit 1; }
grep -q "gantry: error: plugin $other was built against LibTorch 1.13, this runner uses $own: rebuild the plugin" err ||
  { echo "FAIL: the line does not name both LibTorch versions"; exit 1; }
"$gantry" validate "$config" >/dev/null
echo "PASS: a LibTorch 1.13 plugin is refused by the LibTorch $own runner"
