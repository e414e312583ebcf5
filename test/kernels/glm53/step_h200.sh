#!/usr/bin/env bash
# One H200 run of the whole step (results/step3_h200_*). PARTS picks (default "pre bf16 fp8 fault pretime time"):
#   pre     precompile every TP1 build check_step takes (every kind, widths 1 / 2 / 4, bf16 and fp8 KV, the model's
#           context, deadline 10 s as check_step's build: a 64-bit timer bound), MoE kinds 5 at a time (~17 GB each)
#   bf16    check_step at GLM-5.3's real shapes, bf16 KV, 8K and 128K, every step, the greedy loop, the 1-ulp chaos
#   fp8     the same with fp8 KV (a 576-value-row decode backend)
#   fault   the serving build's planted missed arrival in a child process
#   pretime precompile the TP8 builds time_step takes (dense, indexer, shared, tail at 1 / 2 / 4 / 8 rows, 8K)
#   time    time_step: 79 launches in one graph at the TP8 shard against the launches alone, the floor and per-op
# LAYERS: check_step's --layers (default 7; 5 fits an 80 GB card). KVS: the KV dtypes pre compiles (default "bf16 fp8").
# From the repo root with .whl carried (and the h200_sglang_model stand-ins at $STUBS); logs under $OUT/logs.
set -u
export PYTHONUNBUFFERED=1 SGLANG_DISABLE_DSA_INDEXER_FUSION=1
OUT=${OUT:-out}; L=$OUT/logs; mkdir -p "$L"; PARTS=${PARTS:-pre bf16 fp8 fault pretime time}
T0=$(date +%s); el() { echo "[elapsed $(( $(date +%s) - T0 )) s] $*" | tee -a "$L/summary.txt"; }
has() { [[ " $PARTS " == *" $1 "* ]]; }
source test/kernels/glm53/h200_env.sh
if has pre; then
  M=(); N=()
  for k in indexer shared; do for w in 1 2 4; do for kv in ${KVS:-bf16 fp8}; do M+=("$k:|$w|$kv||||1|$CTX"); done; done; done
  for k in tokens dense; do for w in 1 2 4; do for kv in ${KVS:-bf16 fp8}; do N+=("$k:|$w|$kv||||1|$CTX"); done; done; done
  for w in 1 2 4; do N+=("tail:|$w|bf16||||1|$CTX"); done; N+=("tail:|1|bf16||0||1|$CTX")
  timeout 300 python3 $G/precompile.py --deadline 10 --jobs 5 --builds "${M[@]}" > "$L/precompile_moe.log" 2>&1 &
  timeout 300 python3 $G/precompile.py --deadline 10 --jobs 9 --builds "${N[@]}" > "$L/precompile_dense.log" 2>&1
  wait; el "pre: $(grep -c FAILED "$L"/precompile_*.log | tr '\n' ' ')failed"
fi
GREEDY_KV=${GREEDY_KV-bf16 fp8}  # the KV dtypes whose run also takes the greedy loop of 32 tokens (set empty: none)
for kv in bf16 fp8; do
  g=0; [[ " $GREEDY_KV " == *" $kv "* ]] && g=32
  has $kv && { timeout 400 python3 $G/check_step.py --model real --layers ${LAYERS:-7} --kv $kv --contexts 8192 131008 \
                 --greedy $g --chaos > "$L/check_step_$kv.log" 2>&1; el "check_step $kv rc=$? $(tail -1 "$L/check_step_$kv.log" | cut -c1-300)"; }
done
has fault && { timeout 300 python3 $G/check_step.py --model real --fault-demo --no-launch --steps none \
                 > "$L/fault_demo.log" 2>&1; el "fault rc=$? $(grep -o 'fault demo.\{0,300\}' "$L/fault_demo.log")"; }
if has pretime; then
  B=(); for k in dense indexer shared tail; do for w in 1 2 4 8; do B+=("$k:|$w|bf16||||8|8192"); done; done
  timeout 300 python3 $G/precompile.py --jobs 16 --builds "${B[@]}" > "$L/precompile_tp8.log" 2>&1
  el "pretime: $(grep -c FAILED "$L/precompile_tp8.log") failed"
fi
has time && { timeout 500 python3 $G/time_step.py --tp 8 --widths 1 2 4 8 --context 8192 > "$L/time_step.log" 2>&1;
              el "time_step rc=$?"; tail -8 "$L/time_step.log"; }
tar czf "$OUT/logs.tgz" -C "$OUT" logs
