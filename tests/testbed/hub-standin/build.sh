#!/usr/bin/env bash
# Builds the stand-in model hub image (test fixture) from the test bed's Debian base image and
# prints its name. The tag is a hash of the inputs: rebuilt exactly when they change.
#
#   tests/testbed/hub-standin/build.sh      # -> sparkfleet-sim/hub-standin:<hash>, also :current
#
# The package index's wheels are fetched by pip on this host (PyPI is reachable from the host,
# not from containers) into a cache keyed by wheels.txt and the machine's architecture, for the
# simulated Spark's Python (Debian bookworm: CPython 3.11, glibc 2.36).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo="sparkfleet-sim"
arch=$(uname -m)
cache="${XDG_CACHE_HOME:-$HOME/.cache}/sparkfleet/hub-wheels/$(sha256sum < "$here/wheels.txt" | cut -c1-12)-$arch"

log() { printf 'hub-standin: %s\n' "$*" >&2; }

base_image() {
    # The newest debootstrap base that build-image.sh made (it makes one when there is none).
    docker images -q "$repo/base-debian" | grep -q . || SIMSPARK_BASE=debian "$here/../build-image.sh" >/dev/null
    docker images "$repo/base-debian" --format '{{.Repository}}:{{.Tag}}' | head -n1
}

wheels() {
    [ -f "$cache/.complete" ] && return
    log "downloading the index's wheels for cp311 $arch into $cache"
    rm -rf "$cache" && mkdir -p "$cache"
    local platforms=() tag
    # Every manylinux tag glibc 2.36 accepts that wheels of these projects are published with.
    for tag in manylinux_2_36 manylinux_2_34 manylinux_2_28 manylinux_2_17 manylinux2014 manylinux_2_5 manylinux1; do
        platforms+=(--platform "${tag}_${arch}")
    done
    python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.11 --implementation cp \
        --abi cp311 --abi abi3 "${platforms[@]}" -d "$cache" -r "$here/wheels.txt" >&2
    touch "$cache/.complete"
}

build() {  # IMAGE BASE: the build context is the sources plus the cached wheels
    log "building $1 from $2"
    context=$(mktemp -d)  # global: the EXIT trap runs after the function returns
    trap 'rm -rf "$context"' EXIT
    cp "$here"/{Containerfile,generate.py,hub.py,hubcore.py,modelscope_api.py} "$context/"
    mkdir "$context/wheels" && cp "$cache"/*.whl "$context/wheels/"
    docker build -q -f "$context/Containerfile" --build-arg BASE_IMAGE="$2" -t "$1" "$context" >/dev/null
}

main() {
    local base key image
    base=$(base_image)
    wheels
    key=$( (docker image inspect -f '{{.Id}}' "$base"; echo "$arch";
            cd "$here" && sha256sum Containerfile generate.py hub.py hubcore.py modelscope_api.py wheels.txt) \
        | sha256sum | cut -c1-12)
    image="$repo/hub-standin:$key"
    docker image inspect "$image" >/dev/null 2>&1 || build "$image" "$base"
    docker tag "$image" "$repo/hub-standin:current"
    echo "$image"
}

main "$@"
