#!/usr/bin/env bash
# Builds the vLLM stand-in images (test fixtures) from the test bed's Debian base image, one per
# supported vLLM release, and prints their names. Each tag is a hash of its inputs: rebuilt exactly
# when they change. The layers before the release's tables are shared by all releases.
#
#   tests/testbed/vllm-standin/build.sh     # -> sparkfleet-sim/vllm-standin:<hash>-<release>, one a line
#
# Each image is also tagged as the real release's image is named (the tags in RELEASE_TAGS), and
# sparkfleet-sim/vllm-openai:standin, the name the Molecule scenarios load into the simulated Spark's
# own Docker engine, points at STANDIN_RELEASE's (the release the vllm role pins).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo="sparkfleet-sim"
# release -> the tag its real image has on Docker Hub: vllm/vllm-openai:v0.19.1-cu130 (CUDA 13 builds of
# 0.19.x carried a -cu130 suffix) and vllm/vllm-openai:v0.34.0 (CUDA 13 is the default from 0.20 on,
# .buildkite/scripts/publish-release-images.sh in the 0.34.0 sdist).
declare -A RELEASE_TAGS=([0.19.1]=v0.19.1-cu130 [0.34.0]=v0.34.0)
RELEASES=(0.19.1 0.34.0)
STANDIN_RELEASE=0.34.0
# Releases whose image has the label ai.vllm.image.tag (vLLM 0.34.0's docker/Dockerfile:1356-1369;
# 0.19.1's image has none): its value is the public tag.
declare -A IMAGE_TAG_LABEL=([0.34.0]=vllm/vllm-openai:v0.34.0)

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

# The real image's CUDA environment (releases/<version>/image.env: NAME=value lines taken literally, '#'
# comments) into ENV_ARGS, --build-arg words for CUDA_VERSION and NVIDIA_REQUIRE_CUDA: both required, nothing else.
image_env_args() {
    local file=$1 line name cuda="" require=""
    ENV_ARGS=()
    [ -f "$file" ] || { log "no $file"; return 1; }
    while IFS= read -r line || [ -n "$line" ]; do
        case $line in '' | '#'*) continue ;; esac
        name=${line%%=*}
        case $name in
            CUDA_VERSION) cuda=1 ;;
            NVIDIA_REQUIRE_CUDA) require=1 ;;
            *) log "$file: $name is not one of CUDA_VERSION, NVIDIA_REQUIRE_CUDA"; return 1 ;;
        esac
        ENV_ARGS+=(--build-arg "$line")
    done < "$file"
    if [ -z "$cuda" ] || [ -z "$require" ]; then
        log "$file: CUDA_VERSION and NVIDIA_REQUIRE_CUDA are both required"
        return 1
    fi
}

build_release() {
    local base=$1 release=$2 key image label=()
    image_env_args "$here/releases/$release/image.env"
    key=$( (docker image inspect -f '{{.Id}}' "$base"; echo "$release ${IMAGE_TAG_LABEL[$release]:-}"
            cat "$here/Containerfile" "$here/vllm" "$here/bench_serve.py" "$here/releases/$release/image.env" \
                "$here/releases/$release/vllm_serve.json" "$here/releases/$release/vllm_bench_serve.json") \
        | sha256sum | cut -c1-12)
    image="$repo/vllm-standin:$key-$release"
    if [ -n "${IMAGE_TAG_LABEL[$release]:-}" ]; then
        label=(--label "ai.vllm.image.tag=${IMAGE_TAG_LABEL[$release]}")
    fi
    if docker image inspect "$image" >/dev/null 2>&1; then
        log "up to date: $image"
    else
        log "building $image from $base"
        docker build -q -f "$here/Containerfile" --build-arg BASE_IMAGE="$base" --build-arg VLLM_RELEASE="$release" \
            "${ENV_ARGS[@]}" "${label[@]}" -t "$image" "$here" >/dev/null
    fi
    docker tag "$image" "$repo/vllm-openai:${RELEASE_TAGS[$release]}"
    if [ "$release" = "$STANDIN_RELEASE" ]; then
        docker tag "$image" "$repo/vllm-openai:standin"
    fi
    echo "$image"
}

main() {
    local base release
    base=$(base_image)
    for release in "${RELEASES[@]}"; do
        build_release "$base" "$release"
    done
}

main "$@"
