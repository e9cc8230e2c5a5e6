#!/usr/bin/env bash
# Make an old-glibc userland (a minimal root filesystem) for the old-glibc test of libnvshare.so
# (tests/interposer/test_glibc_floor.py runs the mock driver's program in it under chroot).
#
# Usage (as root; needs debootstrap): tools/make_old_glibc_rootfs.sh [SUITE] [DIR]
#   SUITE  xenial (default: Ubuntu 16.04, glibc 2.23, the oldest userland the Ubuntu archive still
#          serves) or bullseye (Debian 11, glibc 2.31, the oldest the Debian mirror serves)
#   DIR    default ${XPUSHARE_TOOLS_CACHE:-~/.cache/xpushare-tools}/rootfs-SUITE, where the test
#          looks (XPUSHARE_OLD_GLIBC_ROOT names another)
# Env:   XPUSHARE_UBUNTU_MIRROR (default http://archive.ubuntu.com/ubuntu),
#        XPUSHARE_DEBIAN_MIRROR (default http://deb.debian.org/debian)
# With libc6-dev (the headers and crt files the test builds its programs against). Takes about a
# minute and 170 MB. Debian's archive keys come with debootstrap; Ubuntu's
# (ubuntu-keyring) are not packaged on Debian: where they are absent, the xenial suite is fetched
# without checking the Release signature (the rootfs only ever runs the test's own programs).
set -euo pipefail

SUITE="${1:-xenial}"
CACHE="${XPUSHARE_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/xpushare-tools}"
DIR="${2:-$CACHE/rootfs-$SUITE}"

command -v debootstrap >/dev/null 2>&1 || { echo "$0: debootstrap is not installed (apt-get install debootstrap)" >&2; exit 3; }
[ "$(id -u)" = 0 ] || { echo "$0: debootstrap needs root" >&2; exit 3; }

case "$SUITE" in
    xenial)
        MIRROR="${XPUSHARE_UBUNTU_MIRROR:-http://archive.ubuntu.com/ubuntu}"
        KEYRING=/usr/share/keyrings/ubuntu-archive-keyring.gpg
        if [ -f "$KEYRING" ]; then CHECK=(--keyring="$KEYRING"); else CHECK=(--no-check-gpg); fi ;;
    bullseye)
        MIRROR="${XPUSHARE_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
        CHECK=() ;;
    *) echo "$0: unknown suite $SUITE (xenial or bullseye)" >&2; exit 2 ;;
esac

if [ -x "$DIR/usr/bin/env" ] && [ -f "$DIR/usr/lib/x86_64-linux-gnu/crt1.o" ]; then
    echo "$DIR"
    exit 0
fi
mkdir -p "$(dirname "$DIR")"
rm -rf "$DIR.tmp"
debootstrap --variant=minbase --include=libc6-dev "${CHECK[@]}" "$SUITE" "$DIR.tmp" "$MIRROR" >&2
rm -rf "$DIR" && mv "$DIR.tmp" "$DIR"
echo "$DIR"
