#!/usr/bin/env bash
# Proves the package list complete: runs the README's two commands from a
# clean clone in a Debian 12 chroot that holds only a minimal base system
# (debootstrap --variant=minbase) plus what scripts/setup.sh installs. A
# package that only this machine happens to have makes it fail. Not part of
# the test suite (it downloads ~1.5 GB of packages and builds from scratch,
# ~30-40 min on 2 cores); run it after changing setup.sh or the build's
# dependencies, as root:
#
#   scripts/fresh_check.sh [--no-tests]        # demo, then the whole suite
#
# The minimal base is cached in $GANTRY_FRESH_CACHE (default
# /var/cache/gantry-fresh), outside the repository; each run unpacks it anew.
set -euo pipefail
cd "$(dirname "$0")/.."
run_tests=1
[[ "${1:-}" == --no-tests ]] && run_tests=0
[[ $(id -u) -eq 0 ]] || { echo "fresh_check: run as root (debootstrap, chroot, mounts)" >&2; exit 1; }

cache=${GANTRY_FRESH_CACHE:-/var/cache/gantry-fresh}
base=$cache/bookworm-minbase.tar
mkdir -p "$cache"
if [[ ! -f $base ]]; then
  command -v debootstrap >/dev/null || { apt-get update -q && apt-get install -y -q debootstrap; }
  tmp=$(mktemp -d /var/tmp/gantry-base.XXXXXX)
  debootstrap --variant=minbase bookworm "$tmp" http://deb.debian.org/debian
  tar -C "$tmp" -cf "$base.part" . && mv "$base.part" "$base"
  rm -rf "$tmp"
fi

root=$(mktemp -d /var/tmp/gantry-fresh.XXXXXX)
cleanup() {
  for m in run dev/shm dev/pts dev sys proc; do umount -l "$root/$m" 2>/dev/null || true; done
  umount -l "$root" 2>/dev/null || true
  rm -rf --one-file-system "$root"
}
trap cleanup EXIT
mount --bind "$root" "$root"  # / of the chroot is a mount point, as on a machine (unshare -m, ip netns need it)
tar -C "$root" -xf "$base"
chmod 755 "$root"  # the chroot's / (tar gave it mktemp's 0700): users such as munge must traverse it
# The same package sources as this machine (the registries CI reaches).
rm -f "$root"/etc/apt/sources.list
cp /etc/apt/sources.list.d/debian.sources "$root"/etc/apt/sources.list.d/ 2>/dev/null ||
  cp /etc/apt/sources.list "$root"/etc/apt/sources.list
cp /etc/resolv.conf "$root"/etc/resolv.conf
echo "127.0.0.1 localhost $(hostname)" >"$root"/etc/hosts
mount -t proc proc "$root/proc"
mount --rbind /sys "$root/sys"
mount --rbind /dev "$root/dev"
mount -t tmpfs tmpfs "$root/run"
# A clean clone of what is committed, as a user gets it.
git clone -q "$PWD" "$root/src/gantry"

in_root() { chroot "$root" /usr/bin/env -i HOME=/root PATH=/usr/sbin:/usr/bin:/sbin:/bin TERM=dumb bash -c "$1"; }
echo "fresh_check: $(in_root 'dpkg-query -W | wc -l') packages in the chroot before setup"
start=$(date +%s)
in_root 'cd /src/gantry && scripts/demo.sh trainer.max_steps=200'
echo "fresh_check: demo passed in a fresh chroot after $(( $(date +%s) - start )) s ($(in_root 'dpkg-query -W | wc -l') packages now)"
if ((run_tests)); then
  in_root 'cd /src/gantry && scripts/test.sh'
  echo "fresh_check: scripts/test.sh passed in a fresh chroot after $(( $(date +%s) - start )) s"
fi
