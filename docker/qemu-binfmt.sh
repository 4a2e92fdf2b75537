#!/usr/bin/env bash
# Lets this machine run another architecture's Linux binaries (and so `--platform linux/arm64`
# images and image builds) through qemu's user-mode emulator:
#
#   docker/qemu-binfmt.sh [ARCH]          # aarch64 (the default), or another qemu arch name
#
# It registers qemu-ARCH with the kernel's binfmt_misc with the F (fix-binary) flag: the kernel
# opens the emulator once, here, so it also runs binaries inside containers whose filesystem
# has no emulator. An existing registration with F is kept; one without F is replaced. Needs
# root and Debian's qemu-user-static (apt-get install qemu-user-static), whose binfmt
# description it uses. Registrations last until reboot.
set -euo pipefail

arch=${1:-aarch64}
name="qemu-${arch}"
binfmt=/proc/sys/fs/binfmt_misc
description="/usr/lib/binfmt.d/${name}.conf"

die() { echo "qemu-binfmt.sh: $*" >&2; exit 1; }

if [ -f "$binfmt/$name" ] && grep -q '^enabled' "$binfmt/$name" && grep -q '^flags:.*F' "$binfmt/$name"; then
  exit 0
fi
[ "$(id -u)" = 0 ] || die "registering a binfmt handler needs root"
[ -f "$description" ] || die "no $description: apt-get install qemu-user-static"
if [ ! -w "$binfmt/register" ]; then
  mount -t binfmt_misc binfmt_misc "$binfmt" 2>/dev/null || die "cannot mount binfmt_misc at $binfmt"
fi
# Debian's line is the kernel's own register format; make sure it carries F.
line=$(grep -v '^#' "$description" | head -n 1)
flags=${line##*:}
case "$flags" in *F*) ;; *) line="${line}F" ;; esac
interpreter=$(echo "$line" | awk -F: '{print $(NF-1)}')
[ -x "$interpreter" ] || die "the emulator $interpreter is missing: apt-get install qemu-user-static"
[ -f "$binfmt/$name" ] && echo -1 >"$binfmt/$name"  # registered without F: replaced
echo "$line" >"$binfmt/register" || die "the kernel refused the $name handler"
grep -q '^flags:.*F' "$binfmt/$name" || die "$name is registered without the F flag"
