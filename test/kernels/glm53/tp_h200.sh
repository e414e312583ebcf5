#!/usr/bin/env bash
# The launches at TP > 1 as emulated ranks on one H200 (check_layer.py --tp-emulate R: R concurrent launches, one a
# rank, exchanging through one allocation of this GPU's memory). PARTS picks (default "pre check more"):
#   pre    precompile the emulated ranks' builds (precompile.py field EMU 1), JOBS at once (default 10)
#   check  shared and tail at TP 2 (widths 1, 2) and TP 8 (widths 1, 8), 8K, bf16 KV, every control, the held rank
#   more   indexer, dense and tokens at TP 8 width 1 (and indexer at TP 2 width 1), 8K, bf16, every control
# From the repo root; logs under $OUT/tp (tp_check.log: every check's output; tp_precompile.log).
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; L=$OUT/tp; mkdir -p "$L"; PARTS=${PARTS:-pre check more}; JOBS=${JOBS:-10}
T0=$(date +%s); el() { echo "[elapsed $(( $(date +%s) - T0 )) s] $*" | tee -a "$L/tp_check.log"; }
has() { [[ " $PARTS " == *" $1 "* ]]; }
export TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-$HOME/.triton/cache}
G=test/kernels/glm53
export PYTHONPATH="$PWD:$PWD/$G:${PYTHONPATH:-}"
if has pre; then
  B=()
  for k in shared tail; do for w in 1 2; do B+=("$k:|$w|bf16||||2|8192|1"); done; for w in 1 8; do B+=("$k:|$w|bf16||||8|8192|1"); done; done
  B+=("indexer:|1|bf16||||2|8192|1" "indexer:|1|bf16||||8|8192|1" "dense:|1|bf16||||8|8192|1" "tokens:|1|bf16||||8|8192|1")
  timeout 240 python3 $G/precompile.py --jobs "$JOBS" --builds "${B[@]}" > "$L/tp_precompile.log" 2>&1
  el "tp pre rc=$?: $(grep -c FAILED "$L/tp_precompile.log") failed"
fi
run() { timeout "$1" python3 $G/check_layer.py "${@:2}" --contexts 8192 --kv bf16 >> "$L/tp_check.log" 2>&1
        el "check_layer ${*:2} rc=$? $(tail -1 "$L/tp_check.log")"; }
if has check; then
  for k in shared tail; do
    run 150 --kind $k --tp-emulate 2 --widths 1 2
    run 150 --kind $k --tp-emulate 8 --widths 1 8
  done
fi
if has more; then
  run 120 --kind indexer --tp-emulate 8 --widths 1 --no-deadline
  run 120 --kind dense --tp-emulate 8 --widths 1 --no-deadline
  run 120 --kind tokens --tp-emulate 8 --widths 1 --no-deadline
  run 120 --kind indexer --tp-emulate 2 --widths 1 --no-deadline
fi
