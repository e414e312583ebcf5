#!/usr/bin/env bash
# The launches at TP > 1 as emulated ranks on one H200 (check_layer.py --tp-emulate R: R concurrent launches, one a
# rank, exchanging through one allocation of this GPU's memory). PARTS picks (default "pre check"):
#   pre    precompile the emulated ranks' builds the checks and timings take (precompile.py field EMU 1, and LOCAL 1
#          for the push-free builds), JOBS at once (default 14)
#   check  in order, each while BUDGET seconds (default 600, from the script's start) last: shared at TP 2 (widths 1,
#          2) and TP 8 (width 1), tail at TP 2 (1, 2) and TP 8 (1, 8), tokens, indexer and dense at TP 8 (width 1);
#          8K, bf16 KV, every control; the held rank with the first of each kind
#   time   time_layers.py --tp-emulate: every kind at TP 8 (rows 1, 8) and the shared kind at TP 2 (1, 8), with and
#          without the pushes, each with its NVLink projection (tp_time.log); then time_tp.py's projection for every
#          kind at TP 2 / 4 / 8 and rows 1-8 (no GPU)
# From the repo root; logs under $OUT/tp (tp_check.log: every check's output; tp_precompile.log; tp_time.log).
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; L=$OUT/tp; mkdir -p "$L"; PARTS=${PARTS:-pre check}; JOBS=${JOBS:-14}; BUDGET=${BUDGET:-600}
T0=$(date +%s); el() { echo "[elapsed $(( $(date +%s) - T0 )) s] $*" | tee -a "$L/tp_check.log"; }
has() { [[ " $PARTS " == *" $1 "* ]]; }
export TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-$HOME/.triton/cache}
G=test/kernels/glm53
export PYTHONPATH="$PWD:$PWD/$G:${PYTHONPATH:-}"
CHECKS=("shared 2 1 2" "shared 8 1" "tail 2 1 2" "tail 8 1 8" "tokens 8 1" "indexer 8 1" "dense 8 1")
TIMES=("shared 8 1 8" "indexer 8 1 8" "dense 8 1 8" "tokens 8 1 8" "tail 8 1 8" "shared 2 1 8")
[[ -n "${ONLY_TIMES:-}" ]] && IFS=';' read -r -a TIMES <<< "$ONLY_TIMES"  # e.g. "dense 8 1 8;tail 8 1"
if has pre; then
  B=()
  for c in "${CHECKS[@]}"; do set -- $c; k=$1; tp=$2; shift 2; for w in "$@"; do B+=("$k:|$w|bf16||||$tp|8192|1"); done; done
  for c in "${TIMES[@]}"; do set -- $c; k=$1; tp=$2; shift 2
    for w in "$@"; do B+=("$k:|$w|bf16||||$tp|8192|1" "$k:|$w|bf16||||$tp|8192|1|1"); done; done
  timeout 300 python3 $G/precompile.py --jobs "$JOBS" --builds "${B[@]}" > "$L/tp_precompile.log" 2>&1
  el "tp pre rc=$?: $(grep -c FAILED "$L/tp_precompile.log") failed"
fi
if has check; then
  seen=" "
  for c in "${CHECKS[@]}"; do
    set -- $c; k=$1; tp=$2; shift 2
    left=$(( BUDGET - ($(date +%s) - T0) - 10 ))
    if (( left < 40 )); then el "not run (budget): check_layer --kind $k --tp-emulate $tp --widths $*"; continue; fi
    held=--no-deadline; [[ "$seen" == *" $k "* ]] || held=""; seen="$seen$k "
    timeout $(( left < 150 ? left : 150 )) python3 $G/check_layer.py --kind $k --tp-emulate $tp --widths "$@" \
      --contexts 8192 --kv bf16 $held >> "$L/tp_check.log" 2>&1
    el "check_layer --kind $k --tp-emulate $tp --widths $* $held rc=$? $(tail -1 "$L/tp_check.log")"
  done
fi
if has time; then
  for c in "${TIMES[@]}"; do
    set -- $c; k=$1; tp=$2; shift 2
    left=$(( BUDGET - ($(date +%s) - T0) - 10 ))
    if (( left < 40 )); then el "not timed (budget): $k --tp-emulate $tp --widths $*"; continue; fi
    timeout $(( left < 150 ? left : 150 )) python3 $G/time_layers.py --kind $k --tp-emulate $tp --widths "$@" \
      --contexts 8192 >> "$L/tp_time.log" 2>&1
    el "time_layers --kind $k --tp-emulate $tp --widths $* rc=$? $(grep '^rows' "$L/tp_time.log" | tail -$# | cut -c1-60 | tr '\n' ';')"
  done
  python3 $G/time_tp.py >> "$L/tp_time.log" 2>&1
fi
