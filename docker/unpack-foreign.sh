#!/usr/bin/env bash
# Finishes a `debootstrap --foreign` root without its second stage, for docker/offline-base.sh's
# bases of another architecture (linux/arm64 on x86_64):
#
#   docker/unpack-foreign.sh ROOT
#
# The second stage runs every package's dpkg and maintainer scripts under qemu: about half an
# hour on 2 cores for the base's packages. Here the packages debootstrap fetched but left for
# that stage are unpacked as files (dpkg-deb into tar, keeping the merged-/usr links) and what
# their scripts do that a build image needs is done on this machine's side: the users and
# groups (base-passwd), the alternatives links (cc, c++, awk, which, ...), the CA bundle
# (ca-certificates) and the loader cache (ldconfig, the one program run under emulation, when
# the root has it and this machine runs its binaries). No package database is written: the
# image never runs apt. Needs root (files keep their owners) and dpkg-deb.
set -euo pipefail

die() { echo "unpack-foreign.sh: $*" >&2; exit 1; }

root=${1:?usage: docker/unpack-foreign.sh ROOT}
[ -f "$root/debootstrap/base" ] && [ -f "$root/debootstrap/debpaths" ] \
  || die "$root is not a debootstrap --foreign root (no debootstrap/base and debpaths)"
command -v dpkg-deb >/dev/null || die "dpkg-deb is not installed"

# The packages the first stage only fetched (it extracted the 'required' ones itself).
while read -r package; do
  deb=$(awk -v p="$package" '$1 == p { print $2 }' "$root/debootstrap/debpaths")
  [ -n "$deb" ] && [ -f "$root$deb" ] || die "debootstrap fetched no .deb for $package"
  # dpkg-deb -x would replace /bin, /lib, /sbin (links into /usr) with folders.
  dpkg-deb --fsys-tarfile "$root$deb" | tar -C "$root" -x --keep-directory-symlink \
    || die "cannot unpack $(basename "$deb")"
done < <(tr ' ' '\n' <"$root/debootstrap/base" | grep -v '^$')

# base-passwd's postinst: the system users and groups.
mkdir -p "$root/etc"
for table in passwd group; do
  [ -f "$root/etc/$table" ] || [ ! -f "$root/usr/share/base-passwd/$table.master" ] \
    || cp "$root/usr/share/base-passwd/$table.master" "$root/etc/$table"
done

# The alternatives the packages' postinsts install (LINK NAME TARGET), each where its target is there.
while read -r link name target; do
  [ -e "$root$target" ] || [ -L "$root$target" ] || continue
  [ -e "$root$link" ] || [ -L "$root$link" ] && continue
  mkdir -p "$root/etc/alternatives" "$(dirname "$root$link")"
  ln -sfn "$target" "$root/etc/alternatives/$name"
  ln -sfn "/etc/alternatives/$name" "$root$link"
done <<'EOF'
/usr/bin/cc cc /usr/bin/gcc
/usr/bin/c++ c++ /usr/bin/g++
/usr/bin/c89 c89 /usr/bin/c89-gcc
/usr/bin/c99 c99 /usr/bin/c99-gcc
/lib/cpp cpp /usr/bin/cpp
/usr/bin/awk awk /usr/bin/mawk
/usr/bin/nawk nawk /usr/bin/mawk
/usr/bin/which which /usr/bin/which.debianutils
/usr/bin/pager pager /usr/bin/more
/usr/sbin/rmt rmt /usr/sbin/rmt-tar
EOF

# ca-certificates' postinst: every certificate it ships enabled, and the bundle of them.
certs="$root/usr/share/ca-certificates"
if [ -d "$certs" ]; then
  mkdir -p "$root/etc/ssl/certs"
  (cd "$certs" && find . -name '*.crt' | sed 's|^\./||' | LC_ALL=C sort) >"$root/etc/ca-certificates.conf"
  while read -r cert; do cat "$certs/$cert"; done <"$root/etc/ca-certificates.conf" >"$root/etc/ssl/certs/ca-certificates.crt"
fi

# libc-bin's: the loader cache, made by the root's own ldconfig (a chroot through qemu's handler).
if [ -x "$root/sbin/ldconfig" ]; then
  chroot "$root" /sbin/ldconfig 2>/dev/null || echo "unpack-foreign.sh: no loader cache (ldconfig did not run): the loader searches its default folders" >&2
fi

# debootstrap's leftovers: its stage files, the fetched .debs, /proc as a link to the host's.
rm -rf "$root/debootstrap" "$root"/var/cache/apt/archives/*.deb
if [ -L "$root/proc" ]; then rm -f "$root/proc" && mkdir -m 555 "$root/proc"; fi
