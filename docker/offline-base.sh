#!/usr/bin/env bash
# A base for kbuild's CPU and CUDA build images made from Debian's packages alone, for
# machines that reach no image registry (quay.io, Docker Hub) but do reach a Debian mirror
# and a package index:
#
#   docker/offline-base.sh [SUITE] [ARCH] # bookworm (glibc 2.36, Python 3.11) or bullseye (2.31, 3.9);
#                                         # amd64 or arm64 (Debian's names; default: this machine's)
#   kbuild build KERNEL --runner docker --base-image "$(docker/offline-base.sh | tail -n 1)"
#
# It debootstraps a minimal SUITE with python3 (venv, headers), g++, git and ca-certificates, imports
# it into the local engine and prints its tag on the last line. An image of that tag is
# kept (rerun with KBUILD_REBUILD_BASE=1 to make it again). Needs root, debootstrap and a
# running Docker engine. The mirror is $KBUILD_DEBIAN_MIRROR, else the one apt uses here.
# An ARCH other than this machine's is fetched with `debootstrap --foreign` and finished by
# docker/unpack-foreign.sh (its packages unpacked as files here, not dpkg's second stage under
# qemu: about 1.5 minutes instead of half an hour for arm64 on 2 cores), and imported as that
# platform's image, whose binaries run through qemu (docker/qemu-binfmt.sh registers it) (for
# aarch64 variants: `kbuild build --runner docker --variant ...-aarch64-linux --base-image TAG`).
# Builds on it meet manylinux_2_<glibc minor> (2_36 on bookworm), not manylinux_2_28: kbuild
# says so, and `kbuild check` reports the policy each variant meets.
set -euo pipefail

suite=${1:-bookworm}
arch=${2:-$(dpkg --print-architecture 2>/dev/null || echo amd64)}
packages=python3,python3-dev,python3-venv,g++,git,ca-certificates
# amd64 keeps the plain suite tag; other architectures name theirs.
tag="kbuild-offline-base:${suite}$([ "$arch" = amd64 ] || echo "-$arch")"
case "$arch" in
  amd64) platform=linux/amd64 qemu=x86_64 ;;
  arm64) platform=linux/arm64 qemu=aarch64 ;;
  *) echo "offline-base.sh: no platform for ARCH $arch (amd64 or arm64)" >&2; exit 1 ;;
esac

die() { echo "offline-base.sh: $*" >&2; exit 1; }

apt_mirror() {  # the first Debian archive apt is configured with (deb822 or one-line sources)
  local uri
  uri=$(grep -hs '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '{print $2}' | grep -v security | head -n 1 || true)
  [ -n "$uri" ] || uri=$(grep -hs '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null \
    | awk '{print $2}' | grep -v security | head -n 1 || true)
  echo "${uri:-http://deb.debian.org/debian}"
}

set_architecture() {  # set_architecture TAG ARCH: rewrite the image's config (docker save, edit, load)
  local tag=$1 arch=$2 dir config new status=0
  dir=$(mktemp -d /tmp/kbuild-offline-base-image.XXXXXX)
  { docker save "$tag" | tar -C "$dir" -x \
    && config=$(sed -n 's/.*"Config":"\([0-9a-f]*\.json\)".*/\1/p' "$dir/manifest.json") && [ -n "$config" ] \
    && sed -i "s/\"architecture\":\"[a-z0-9]*\"/\"architecture\":\"$arch\"/" "$dir/$config" \
    && new="$(sha256sum "$dir/$config" | cut -d' ' -f1).json" \
    && mv "$dir/$config" "$dir/$new" && sed -i "s/$config/$new/" "$dir/manifest.json" \
    && docker rmi "$tag" && tar -C "$dir" -c . | docker load; } >/dev/null || status=1
  rm -rf "$dir"
  return $status
}

command -v docker >/dev/null || die "the docker command is not on PATH"
docker info >/dev/null 2>&1 || die "no Docker engine answers (start dockerd, or set DOCKER_HOST)"
# One maker at a time per image: a second caller (CI's early start, then the tests) waits and
# finds the first one's image.
if command -v flock >/dev/null; then
  exec 9>"${TMPDIR:-/tmp}/kbuild-offline-base-${tag#*:}.lock"
  flock 9
fi
# An engine before 23 ignores import's --platform and records its own arch: mark the image's.
ensure_architecture() {
  [ "$(docker image inspect --format '{{.Architecture}}' "$tag")" = "$arch" ] \
    || set_architecture "$tag" "$arch" \
    || die "cannot mark $tag as a $platform image"
}
if [ -z "${KBUILD_REBUILD_BASE:-}" ] && docker image inspect "$tag" >/dev/null 2>&1; then
  ensure_architecture
  echo "$tag"
  exit 0
fi
[ "$(id -u)" = 0 ] || die "debootstrap needs root"
command -v debootstrap >/dev/null || die "debootstrap is not installed (apt-get install debootstrap)"

native=$(dpkg --print-architecture 2>/dev/null || echo amd64)
foreign=()
if [ "$arch" != "$native" ]; then
  "$(dirname "$0")/qemu-binfmt.sh" "$qemu" || die "$arch binaries cannot run here (see docker/qemu-binfmt.sh)"
  foreign=(--arch="$arch" --foreign)
fi

mirror=${KBUILD_DEBIAN_MIRROR:-$(apt_mirror)}
rootfs=$(mktemp -d /tmp/kbuild-offline-base.XXXXXX)
trap 'rm -rf "$rootfs"' EXIT
echo "debootstrap $suite ($arch) from $mirror (with $packages) ..." >&2
bootstrap() {  # the one stage, or a foreign first stage finished without running dpkg under qemu
  debootstrap --variant=minbase "${foreign[@]}" --include="$packages" "$suite" "$rootfs" "$mirror" || return
  [ ${#foreign[@]} = 0 ] || "$(dirname "$0")/unpack-foreign.sh" "$rootfs"
}
bootstrap >"$rootfs.log" 2>&1 \
  || { tail -n 5 "$rootfs.log" >&2; rm -f "$rootfs.log"; die "debootstrap $suite ($arch) from $mirror failed"; }
rm -f "$rootfs.log"
# What only a package manager run needs: the image never runs apt.
rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin "$rootfs"/var/cache/apt/archives/*.deb
tar -C "$rootfs" -c . | docker import --platform "$platform" \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV LANG=C.UTF-8' \
  --change 'CMD ["/bin/bash"]' \
  --message "debootstrap --variant=minbase --include=$packages $suite ($arch)" - "$tag" >/dev/null
ensure_architecture
echo "$tag"
