#!/usr/bin/env bash
# One H200 run of the default build: trace tables, time_layers (TP8, 1/2/4/8 rows, 8K and 128K, with
# SGLang's per-op path), check_layer at TP8 (rows 1 and 8, 8K and 128K, bf16 and fp8 KV; rows 2 and 4 at 8K) and TP1.
# From the repo root with .whl carried: bash test/kernels/glm53/final_h200.sh ; outputs flat under $OUT.
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
T0=$(date +%s); el() { echo "[elapsed $(( $(date +%s) - T0 )) s] $*" | tee -a "$OUT/summary.txt"; }
mkdir -p /tmp/site
python3 -c "import glob, zipfile; [zipfile.ZipFile(w).extractall('/tmp/site') for w in sorted(glob.glob('.whl/*.whl'))]"
export PYTHONPATH="$PWD:/tmp/site:${PYTHONPATH:-}"
el "setup"
B=(); for w in 1 2 4 8; do B+=("|$w|bf16"); done
for w in 1 8; do B+=("|$w|bf16|||1"); done; for w in 1 2 4 8; do B+=("|$w|fp8"); done; B+=("|1|bf16||5")
timeout 120 python3 test/kernels/glm53/precompile.py --jobs 16 --builds "${B[@]}" > "$OUT/1_precompile.log" 2>&1
el "precompile rc=$?"
timeout 90 python3 test/kernels/glm53/time_layers.py --tp 8 --trace 1 8 > "$OUT/2_trace.log" 2>&1
el "trace rc=$?"
timeout 200 python3 test/kernels/glm53/time_layers.py --tp 8 --widths 1 2 4 8 --contexts 8192 131072 --no-variants \
  > "$OUT/3_time_layers.log" 2>&1
el "time_layers rc=$?"
timeout 150 python3 test/kernels/glm53/check_layer.py --tp 8 --widths 1 8 --contexts 8192 131072 --kv bf16 fp8 \
  > "$OUT/4_check_layer_tp8.log" 2>&1
el "check_layer tp8 rc=$?"
timeout 100 python3 test/kernels/glm53/check_layer.py --tp 8 --widths 2 4 --contexts 8192 --kv bf16 fp8 --controls none \
  > "$OUT/4_check_layer_tp8_w2w4.log" 2>&1
el "check_layer tp8 w2w4 rc=$?"
timeout 100 python3 test/kernels/glm53/check_layer.py --tp 1 --widths 1 --contexts 8192 --kv bf16 --controls none \
  > "$OUT/5_check_layer_tp1.log" 2>&1
el "check_layer tp1 rc=$?"
