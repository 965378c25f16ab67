#!/usr/bin/env bash
# Builds the simulated Spark image once and reuses it: the tag is a hash of every input
# that defines the image, so it is rebuilt exactly when one of them changes.
#
#   tests/testbed/build-image.sh            # prints the image name it made or found
#   SIMSPARK_BASE=ubuntu|debian|auto        # auto: ubuntu:24.04 when a registry answers
#
# Two layers: a base root filesystem (ubuntu:24.04 pulled, or Debian bookworm made with
# debootstrap when no registry is reachable, as on the project's CI) and the Spark layer
# (Docker engine, GPU stand-ins) from Containerfile. The result is also tagged
# sparkfleet-sim/spark:${SIMSPARK_TAG:-current}, the name Molecule uses (set SIMSPARK_TAG
# to keep two checkouts with different test beds from taking each other's image).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo="sparkfleet-sim"
mirror="${SIMSPARK_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
base_choice="${SIMSPARK_BASE:-auto}"

log() { printf 'build-image: %s\n' "$*" >&2; }

packages() { grep -v '^\s*\(#\|$\)' "$here/packages.txt" | paste -sd, -; }

hash_of() { sha256sum | cut -c1-12; }

choose_base() {
    case "$base_choice" in
        ubuntu|debian) echo "$base_choice" ;;
        auto)
            if docker image inspect ubuntu:24.04 >/dev/null 2>&1 \
               || timeout 60 docker pull -q ubuntu:24.04 >/dev/null 2>&1; then
                echo ubuntu
            else
                echo debian
            fi ;;
        *) log "SIMSPARK_BASE=$base_choice: expected ubuntu, debian or auto"; exit 2 ;;
    esac
}

debian_base() {
    local key image rootfs
    key=$(printf '%s\n%s\n%s\n' "$(packages)" "$mirror" "$(sed -n '/^debian_base()/,/^}/p' "$0")" | hash_of)
    image="$repo/base-debian:$key"
    if ! docker image inspect "$image" >/dev/null 2>&1; then
        log "making Debian bookworm root filesystem with debootstrap (about a minute)"
        rootfs=$(mktemp -d)
        # The mirror is passed explicitly: the machine's apt sources may list repositories
        # debootstrap cannot use.
        debootstrap --variant=minbase --include="$(packages)" bookworm "$rootfs" "$mirror" >&2
        rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
        tar -C "$rootfs" -c . | docker import -c 'CMD ["/sbin/init"]' - "$image" >/dev/null
        rm -rf "$rootfs"
    fi
    echo "$image"
}

main() {
    local base base_image extra key image
    base=$(choose_base)
    if [ "$base" = ubuntu ]; then
        base_image="ubuntu:24.04"
        extra=$(packages | tr , ' ')
    else
        base_image=$(debian_base)
        extra=""
    fi
    # $extra: on ubuntu:24.04 the package list is installed by the Containerfile, so it
    # belongs to this layer's key (on Debian it is part of the base image's own key). What Python
    # compiles beside the stand-ins when the tests load them is no input (.dockerignore).
    key=$( (echo "$base_image"; echo "$extra"; docker image inspect -f '{{.Id}}' "$base_image";
            cat "$here/Containerfile"; cd "$here" && find standins -type f -not -path '*/__pycache__/*' | sort | xargs sha256sum) \
          | hash_of)
    image="$repo/spark:$key"
    if docker image inspect "$image" >/dev/null 2>&1; then
        log "up to date: $image"
    else
        log "building $image from $base_image"
        docker build -q -f "$here/Containerfile" --build-arg BASE_IMAGE="$base_image" \
            --build-arg EXTRA_PACKAGES="$extra" -t "$image" "$here" >/dev/null
    fi
    docker tag "$image" "$repo/spark:${SIMSPARK_TAG:-current}"
    echo "$image"
}

main "$@"
