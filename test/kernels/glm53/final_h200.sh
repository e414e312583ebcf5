#!/usr/bin/env bash
# One H200 run of the default build of a kind (KIND, default shared): trace tables, time_layers (TP8, 1/2/4/8 rows,
# 8K and 128K, with SGLang's per-op path), check_layer at TP8 (rows 1-8 at 8K with every stage checked alone,
# rows 1 and 8 at 128K; bf16 and fp8 KV; every control at every config), at TP4 / TP2 (the spec's other NVIDIA
# TP sizes) and TP1, every stage checked alone (--stop-after all) everywhere. From the repo root with .whl carried: bash test/kernels/glm53/final_h200.sh ; outputs
# flat under $OUT. PARTS (default "pre trace time check") picks the parts.
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"; KIND=${KIND:-shared}; PARTS=${PARTS:-pre trace time check}
T0=$(date +%s); el() { echo "[elapsed $(( $(date +%s) - T0 )) s] $*" | tee -a "$OUT/summary.txt"; }
has() { [[ " $PARTS " == *" $1 "* ]]; }
mkdir -p /tmp/site
python3 -c "import glob, zipfile; [zipfile.ZipFile(w).extractall('/tmp/site') for w in sorted(glob.glob('.whl/*.whl'))]"
export PYTHONPATH="$PWD:$PWD/test/kernels/glm53:/tmp/site:${PYTHONPATH:-}"
G=test/kernels/glm53
el "setup"
if has pre; then
  B=(); for w in 1 2 4 8; do B+=("|$w|bf16" "|$w|fp8"); done
  for w in 1 8; do B+=("|$w|bf16|||1"); done; B+=("|1|bf16||5" "|1|bf16||||1" "|1|bf16||||2" "|2|bf16||||2" "|1|bf16||||4" "|4|bf16||||4")
  timeout 150 python3 $G/precompile.py --kind $KIND --jobs 16 --builds "${B[@]}" > "$OUT/1_precompile.log" 2>&1
  el "precompile rc=$?"
fi
if has trace; then
  timeout 90 python3 $G/time_layers.py --kind $KIND --tp 8 --trace 1 8 > "$OUT/2_trace.log" 2>&1
  el "trace rc=$?"
fi
if has time; then
  timeout 240 python3 $G/time_layers.py --kind $KIND --tp 8 --widths 1 2 4 8 --contexts 8192 131072 --no-variants \
    > "$OUT/3_time_layers.log" 2>&1
  el "time_layers rc=$?"
fi
if has check; then
  timeout 200 python3 $G/check_layer.py --kind $KIND --tp 8 --widths 1 2 4 8 --contexts 8192 --kv bf16 fp8 \
    --stop-after all > "$OUT/4_check_layer_tp8.log" 2>&1
  el "check_layer tp8 8K rc=$?"
  timeout 120 python3 $G/check_layer.py --kind $KIND --tp 8 --widths 1 8 --contexts 131072 --kv bf16 fp8 --no-deadline \
    --stop-after all > "$OUT/4_check_layer_tp8_128k.log" 2>&1
  el "check_layer tp8 128K rc=$?"
  { timeout 60 python3 $G/check_layer.py --kind $KIND --tp 4 --widths 1 4 --contexts 8192 --kv bf16 --no-deadline --stop-after all
    timeout 60 python3 $G/check_layer.py --kind $KIND --tp 2 --widths 1 2 --contexts 8192 --kv bf16 --no-deadline --stop-after all
    timeout 60 python3 $G/check_layer.py --kind $KIND --tp 1 --widths 1 --contexts 8192 --kv bf16 --no-deadline --stop-after all
  } > "$OUT/5_check_layer_tp4_tp2_tp1.log" 2>&1
  el "check_layer tp4 tp2 tp1 rc=$?"
fi
