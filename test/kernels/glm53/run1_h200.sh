#!/usr/bin/env bash
# H200 run: where the shared launch's time goes (trace tables at rows $WIDTHS, default 1 8) for each tile
# spec in $SPECS (';'-separated, '' = the defaults); $SKIPS (';'-separated stage names): the default
# build traced at row 1 with that stage emptied; then the GEMV helper alone (PROBE=1).
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD:${PYTHONPATH:-}"
OUT=${OUT:-out}; mkdir -p "$OUT"
T0=$(date +%s); el() { echo "[elapsed $(( $(date +%s) - T0 )) s] $*" | tee -a "$OUT/summary.txt"; }
IFS=';' read -r -a SP <<< "${SPECS:-}"; [ ${#SP[@]} -eq 0 ] && SP=("")
read -r -a WS <<< "${WIDTHS:-1 8}"
IFS=';' read -r -a SK <<< "${SKIPS:-}"
B=(); for s in "${SP[@]}"; do for w in "${WS[@]}"; do B+=("$s|$w|bf16|||0" "$s|$w|bf16|||1"); done; done
for k in "${SK[@]}"; do
  m=$(python3 -c "from sgl_amd_mono.glm53.kinds.shared import TABLE; print(1 << TABLE.stage_id('$k'))")
  B+=("|1|bf16|$m||0" "|1|bf16|$m||1")
done
timeout 150 python3 test/kernels/glm53/precompile.py --jobs 16 --builds "${B[@]}" > "$OUT/1_precompile.log" 2>&1
el "precompile rc=$?"
i=0; for s in "${SP[@]}"; do
  timeout 200 python3 test/kernels/glm53/time_layers.py --tp 8 --trace "${WS[@]}" --tiles "$s" > "$OUT/2_trace_$i.log" 2>&1
  el "trace '$s' rc=$?"; i=$((i + 1))
done
for k in "${SK[@]}"; do
  timeout 100 python3 test/kernels/glm53/time_layers.py --tp 8 --trace 1 --skip "$k" > "$OUT/2_trace_skip_$k.log" 2>&1
  el "trace without $k rc=$?"
done
if [ "${PROBE:-0}" != 0 ]; then
  timeout 200 python3 test/kernels/glm53/probe_gemv.py --rows 1 > "$OUT/3_probe_gemv.log" 2>&1
  el "probe rc=$?"
fi
if [ -n "${CHECK:-}" ]; then  # CHECK='<tile spec>': check_layer on it (TP8, rows 1 and 8, 8K, bf16 and fp8 KV)
  C=(); for w in 1 8; do for kv in bf16 fp8; do C+=("$CHECK|$w|$kv"); done; done
  timeout 100 python3 test/kernels/glm53/precompile.py --jobs 8 --builds "${C[@]}" >> "$OUT/1_precompile.log" 2>&1
  timeout 150 python3 test/kernels/glm53/check_layer.py --tp 8 --widths 1 8 --contexts 8192 --kv bf16 fp8 \
    --tiles "$CHECK" > "$OUT/4_check_layer.log" 2>&1
  el "check_layer '$CHECK' rc=$?"
fi
