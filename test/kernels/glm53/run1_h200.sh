#!/usr/bin/env bash
# H200 run: where the shared launch's time goes (trace tables at rows 1 and 8) and the GEMV helper alone.
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:${PYTHONPATH:-}"
OUT=${OUT:-out}; mkdir -p "$OUT"
T0=$(date +%s); el() { echo "[elapsed $(( $(date +%s) - T0 )) s] $*" | tee -a "$OUT/summary.txt"; }
TILES=${TILES:-}
B=(); for w in 1 8; do B+=("$TILES|$w|bf16|||0" "$TILES|$w|bf16|||1"); done
timeout 150 python3 test/kernels/glm53/precompile.py --jobs 4 --builds "${B[@]}" > "$OUT/1_precompile.log" 2>&1
el "precompile rc=$?"
( timeout 200 python3 test/kernels/glm53/time_layers.py --tp 8 --trace 1 8 --tiles "$TILES" > "$OUT/2_trace.log" 2>&1; echo "trace rc=$?" >> "$OUT/2_trace.log" )
el "trace done"
if [ -n "${PROBE:-1}" ] && [ "${PROBE:-1}" != 0 ]; then
  timeout 200 python3 test/kernels/glm53/probe_gemv.py --rows 1 > "$OUT/3_probe_gemv.log" 2>&1
  el "probe rc=$?"
fi
