#!/usr/bin/env bash
# Builds the vLLM stand-in image (test fixture) from the test bed's Debian base image and
# prints its name. The tag is a hash of the inputs: rebuilt exactly when they change.
#
#   tests/testbed/vllm-standin/build.sh     # -> sparkfleet-sim/vllm-standin:<hash>
#
# Also tagged sparkfleet-sim/vllm-openai:standin, the name the Molecule scenario loads
# into the simulated Spark's own Docker engine.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo="sparkfleet-sim"

log() { printf 'vllm-standin: %s\n' "$*" >&2; }

base_image() {
    local image
    # The newest debootstrap base that build-image.sh made; make one when there is none.
    image=$(docker images "$repo/base-debian" --format '{{.Repository}}:{{.Tag}}' | head -n1)
    if [ -z "$image" ]; then
        log "no $repo/base-debian image yet: building the test bed first"
        SIMSPARK_BASE=debian "$here/../build-image.sh" >/dev/null
        image=$(docker images "$repo/base-debian" --format '{{.Repository}}:{{.Tag}}' | head -n1)
    fi
    echo "$image"
}

main() {
    local base key image
    base=$(base_image)
    key=$( (docker image inspect -f '{{.Id}}' "$base"; cat "$here/Containerfile" "$here/vllm" "$here/releases/0.19.1/vllm_serve.json" "$here/bench_serve.py" "$here/releases/0.19.1/vllm_bench_serve.json") \
        | sha256sum | cut -c1-12)
    image="$repo/vllm-standin:$key"
    if docker image inspect "$image" >/dev/null 2>&1; then
        log "up to date: $image"
    else
        log "building $image from $base"
        docker build -q -f "$here/Containerfile" --build-arg BASE_IMAGE="$base" -t "$image" "$here" >/dev/null
    fi
    docker tag "$image" "$repo/vllm-openai:standin"
    echo "$image"
}

main "$@"
