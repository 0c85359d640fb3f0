#!/bin/sh
# Install the Debian packages roundpipe needs to build and test, skipping
# what is already there. Uses sudo when not root.
set -e
pkgs="build-essential autoconf automake libtool pkg-config
      libopenmpi-dev openmpi-bin libhwloc-dev check
      libopenblas-openmp-dev libjson-c-dev"
# Optional extras: clang and its fuzzer runtime for `make fuzz`.
[ "${RP_WITH_FUZZ:-0}" = 1 ] && pkgs="$pkgs clang libclang-rt-14-dev"
missing=""
for p in $pkgs; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
echo "roundpipe: installing:$missing"
SUDO=""
[ "$(id -u)" = 0 ] || SUDO=sudo
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing
