#!/usr/bin/env bash
# Build the offline wheelhouse for the specfleet_openwebui role's pip mode: open-webui and
# the hand-picked runtime closure in requirements.txt beside this script (no torch, no
# CUDA wheels; see README.md), plus a pip wheel to bootstrap a venv on targets whose python
# has no ensurepip (Debian without python3-venv). Downloads once; a complete wheelhouse
# (stamp matching the requirements, the Python version and this script) is reused.
#
# Usage:
#   build_wheelhouse.sh [--python-version X.Y.Z] [--arch x86_64|aarch64] [--dest DIR]
#                       [--ignore-requires-python] [--force]
#
#   --python-version  CPython version of the TARGET's interpreter, with the micro version
#                     (pins such as soupsieve 4.x need >=3.11.5). Default: the controller's
#                     (3.11.7 here). The lab's unit image is Debian trixie with 3.13.5; Jetson
#                     JetPack 7 (Ubuntu 24.04) has 3.12; JetPack 6 (22.04) has 3.10, which
#                     open-webui does not support: use the container mode there.
#   --ignore-requires-python
#                     download even though open-webui declares Requires-Python <3.13 (the
#                     lab's 3.13 unit image; the role needs the matching switch)
#   --arch            machine of the target (default: this machine's)
#   --dest            wheelhouse directory (default lab/build/openwebui/wheelhouse-cpXY-ARCH)
#   --force           download again even when the stamp says the wheelhouse is complete
#
# Prints the wheelhouse path on stdout (last line); progress goes to stderr.
# Exit codes: 0 ok, 1 download failure, 2 usage.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
REQUIREMENTS="$HERE/requirements.txt"
# pip for the venv bootstrap (targets without ensurepip); supports CPython 3.9-3.14.
PIP_PIN="pip==25.1.1"
STAMP_NAME=".specfleet-wheelhouse.stamp"

usage() { sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 2; }
log() { printf '[openwebui wheelhouse %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

PYVER=""
IGNORE_RP=()
ARCH="$(uname -m)"
DEST=""
FORCE=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --python-version) PYVER="$2"; shift 2 ;;
    --arch) ARCH="$2"; shift 2 ;;
    --dest) DEST="$2"; shift 2 ;;
    --ignore-requires-python) IGNORE_RP=(--ignore-requires-python); shift ;;
    --force) FORCE=1; shift ;;
    -h|--help) usage ;;
    *) echo "unknown argument: $1" >&2; usage ;;
  esac
done
PYTHON="${SPECFLEET_PYTHON:-$REPO/.venv/bin/python}"
[[ -x "$PYTHON" ]] || PYTHON=python3
[[ -n "$PYVER" ]] || PYVER="$("$PYTHON" -c 'import platform; print(platform.python_version())')"
[[ "$PYVER" =~ ^3\.[0-9]+\.[0-9]+$ ]] || { echo "--python-version must look like 3.11.7" >&2; usage; }
[[ "$ARCH" == x86_64 || "$ARCH" == aarch64 ]] || { echo "--arch must be x86_64 or aarch64" >&2; usage; }
MINOR="${PYVER#3.}"; MINOR="${MINOR%%.*}"
CPTAG="cp3$MINOR"
DEST="${DEST:-$REPO/lab/build/openwebui/wheelhouse-$CPTAG-$ARCH}"

state() { cat "$0" "$REQUIREMENTS" | sha256sum | cut -d' ' -f1; }
STAMP="$DEST/$STAMP_NAME"
if [[ $FORCE -eq 0 && -f "$STAMP" ]] && grep -qx "state=$(state) $CPTAG $ARCH" "$STAMP"; then
  log "reusing $DEST ($(du -sh "$DEST" | cut -f1), stamp $STAMP)"
  echo "$DEST"
  exit 0
fi

mkdir -p "$DEST"
start=$(date +%s)
# The install (on the target) reads requirements.txt with its markers; the download list has
# them evaluated for the TARGET's version here (pip download would evaluate them for the
# Python running it, even with --python-version).
REQS="$DEST/requirements.txt"
grep -E '^[A-Za-z0-9]' "$REQUIREMENTS" > "$REQS"
echo "$PIP_PIN" >> "$REQS"
DOWNLOAD="$DEST/.download.txt"
"$PYTHON" - "$REQS" "$PYVER" > "$DOWNLOAD" <<'PY'
import sys
from pip._vendor.packaging.requirements import Requirement
path, version = sys.argv[1], sys.argv[2]
env = {"python_version": ".".join(version.split(".")[:2]), "python_full_version": version, "extra": ""}
for line in open(path):
    req = Requirement(line.strip())
    if req.marker is None or req.marker.evaluate(env):
        req.marker = None
        print(req)
PY
log "downloading $(wc -l < "$DOWNLOAD") distributions for $CPTAG $ARCH into $DEST"
# pip does not expand manylinux_2_N to the older glibc tags: list them (glibc 2.17..2.39
# covers Debian 12/13, Ubuntu 22.04/24.04 and L4T).
plats=(--platform "linux_$ARCH" --platform "manylinux2014_$ARCH")
[[ "$ARCH" == x86_64 ]] && plats+=(--platform manylinux1_x86_64 --platform manylinux2010_x86_64)
for minor in $(seq 17 39); do plats+=(--platform "manylinux_2_${minor}_$ARCH"); done
"$PYTHON" -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
  --python-version "$PYVER" --implementation cp --abi "$CPTAG" --abi abi3 --abi none \
  "${IGNORE_RP[@]}" "${plats[@]}" -d "$DEST" -r "$DOWNLOAD" || die "pip download failed (see above)"
rm -f "$DOWNLOAD"

# Nothing beyond the hand-picked closure: no torch/CUDA/triton may have slipped in.
if ls "$DEST" | grep -i -E '^(torch|nvidia_|triton|sentence_transformers|transformers)-' >&2; then
  die "heavy wheels in $DEST (listed above); requirements.txt must stay torch-free"
fi
count=$(ls "$DEST"/*.whl | wc -l)
size=$(du -sh "$DEST" | cut -f1)
printf 'state=%s %s %s\nwheels=%s\nsize=%s\nseconds=%s\ndate=%s\n' "$(state)" "$CPTAG" "$ARCH" \
  "$count" "$size" "$(( $(date +%s) - start ))" "$(date -u +%FT%TZ)" > "$STAMP"
log "complete in $(( $(date +%s) - start )) s: $count wheels, $size"
echo "$DEST"
