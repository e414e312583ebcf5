#!/usr/bin/env bash
# One H200 run: A/B the shared launch's build options, check the fastest, then extras if time remains.
# From the repo root, with .whl carried (SGLang's per-op baseline): bash test/kernels/glm53/final_h200.sh
# Outputs (flat, under $OUT): 0_setup.log 1_precompile.log 2_time_layers_8k.log 3_check_layer.log
#   4_time_layers_128k.log 5_stages.log summary.txt
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
T0=$(date +%s)
el() { echo "[elapsed $(( $(date +%s) - T0 )) s] $*" | tee -a "$OUT/summary.txt"; }
VARS="baseline prefetch pp2 both"

# 0: SGLang's wheels unpacked to /tmp/site (as the earlier per-op runs: PYTHONPATH=/tmp/site)
{
  mkdir -p /tmp/site
  python3 - <<'PY'
import glob, zipfile
for w in sorted(glob.glob(".whl/*.whl")):
    zipfile.ZipFile(w).extractall("/tmp/site")
print("unpacked", len(glob.glob(".whl/*.whl")), "wheels to /tmp/site")
PY
  nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
} > "$OUT/0_setup.log" 2>&1
export PYTHONPATH="$PWD:/tmp/site:${PYTHONPATH:-}"
el "part 0 setup done"

# 1: warm Triton's cache in parallel: the 16 timed builds (4 variants x 4 widths, bf16), then in the
# background the check builds (fp8 w1/w8, the deadline build) of every variant.
B=(); for v in $VARS; do s=$(python3 -c "from sgl_amd_mono.glm53 import launch_shared as ls; d=ls.VARIANTS['$v']; print(f\"prefetch={int(d['prefetch'])},progs_per_sm={d['progs_per_sm']}\")"); eval "SPEC_$v=$s"; for w in 1 2 4 8; do B+=("$s|$w|bf16"); done; done
timeout 120 python3 test/kernels/glm53/precompile.py --jobs 16 --builds "${B[@]}" > "$OUT/1_precompile.log" 2>&1
el "part 1 precompile (timed builds) rc=$?"
C=(); for v in $VARS; do s=$(eval echo \$SPEC_$v); C+=("$s|1|fp8" "$s|8|fp8" "$s|1|bf16||5"); done
( timeout 150 python3 test/kernels/glm53/precompile.py --jobs 12 --builds "${C[@]}" >> "$OUT/1_precompile.log" 2>&1 ) &
BG=$!

# a: time_layers at TP8, 8K, widths 1/2/4/8, the four variants and the per-op path, same run
timeout 150 python3 test/kernels/glm53/time_layers.py --tp 8 --widths 1 2 4 8 --contexts 8192 --no-variants \
  --variants $VARS --pick "$OUT/pick.txt" > "$OUT/2_time_layers_8k.log" 2>&1
el "part a time_layers 8K rc=$?"
PICK=$(cut -d' ' -f2 "$OUT/pick.txt" 2>/dev/null || true); PNAME=$(cut -d' ' -f1 "$OUT/pick.txt" 2>/dev/null || true)
if [ -z "$PICK" ]; then PNAME=baseline; PICK="prefetch=0,progs_per_sm=1"; fi
el "chosen variant: $PNAME ($PICK)"
wait $BG 2>/dev/null
# stage-skip builds of the chosen variant for part c, compiled while check_layer runs
S=("$PICK|1|bf16"); for i in $(seq 0 14); do S+=("$PICK|1|bf16|$((1 << i))"); done
( timeout 200 python3 test/kernels/glm53/precompile.py --jobs 14 --builds "${S[@]}" >> "$OUT/1_precompile.log" 2>&1 ) &
BG=$!

# b: check_layer on the chosen variant: TP8, widths 1 and 8, 8K and 128K, bf16 and fp8 KV
{
  echo "CHECKED VARIANT: $PNAME ($PICK)"
  timeout 110 python3 test/kernels/glm53/check_layer.py --tp 8 --widths 1 8 --contexts 8192 131072 --kv bf16 fp8 \
    --tiles "$PICK"
  rc=$?; echo "check_layer rc=$rc"
  if [ $rc -eq 0 ]; then echo "CHECK_LAYER PASS for variant $PNAME ($PICK)"; else echo "CHECK_LAYER FAIL for variant $PNAME ($PICK) rc=$rc"; fi
} > "$OUT/3_check_layer.log" 2>&1
el "part b $(tail -1 "$OUT/3_check_layer.log")"

# c: if time remains: 128K timing and per-stage skip variants at 1 row, chosen variant
left() { echo $(( 285 - ($(date +%s) - T0) )); }
if [ "$(left)" -gt 30 ]; then
  timeout $(( $(left) > 60 ? 60 : $(left) )) python3 test/kernels/glm53/time_layers.py --tp 8 --widths 1 2 4 8 \
    --contexts 131072 --no-variants --no-perop --tiles "$PICK" > "$OUT/4_time_layers_128k.log" 2>&1
  el "part c1 time_layers 128K rc=$?"
fi
wait $BG 2>/dev/null
if [ "$(left)" -gt 20 ]; then
  timeout $(left) python3 test/kernels/glm53/time_layers.py --tp 8 --stages-only --tiles "$PICK" > "$OUT/5_stages.log" 2>&1
  el "part c2 stages-only rc=$?"
fi
el "done"
