#!/usr/bin/env bash
# The auditor (SGLANG_AMD_MONO_CHECK=1) on one H200 at GLM-5.3's real shapes (TP1, layers 0-6 and the tail, through
# SGLang's real GlmMoeDsaForCausalLM and binding; audit_step.py): a clean run and each planted fault, every layer
# against SGLang's Triton kernels (per_op.py), each part on the launch's own inputs to it, bf16 and fp8 KV, 8K keys,
# width 4 (decode of 3 requests and a pad row; MTP verify of 2 x 2 rows). The GPU bounds (bounds.SERVING_VS_SGLANG)
# are set from its records (results/audit2_h200_*); each fault's "clean X -> Y; 3x clean B failed" lines in
# summary.txt say whether 3x a clean value would be failed. PARTS picks (default "pre bf16 fp8 report"):
#   pre     precompile the width-4 TP1 builds audit_step takes (tokens, dense, indexer, shared at bf16 and fp8 KV, and
#           the tail; deadline 10 s, the model's context: check_step's build keys, as step_h200.sh's pre; 6 jobs: at 9
#           three ran out of GPU memory in the first run; at 6, "pre rc=0: 0 failed" in results/audit2_h200_summary.txt)
#   bf16    audit_step --kv bf16: the unchecked run, the clean check run, each fault of FAULTS_BF16 (default all)
#   fp8     audit_step --kv fp8 with FAULTS_FP8 (default the cache's: kv_norm rope_shift)
#   report  the clean runs' records in one file with its plot, the faults' in another, and their summaries
# From the repo root with .whl carried (and the h200_sglang_model stand-ins at $STUBS). Back under $OUT (5 files):
# audit_clean.jsonl, audit_clean.png, audit_faults.jsonl, summary.txt, logs.tgz (every log and per-run report).
set -u
export PYTHONUNBUFFERED=1 SGLANG_DISABLE_DSA_INDEXER_FUSION=1
OUT=${OUT:-out}; L=${LOGS:-/tmp/audit_logs}; mkdir -p "$OUT" "$L"; PARTS=${PARTS:-pre bf16 fp8 report}
FAULTS_BF16=${FAULTS_BF16:-o_proj_scale kv_norm rope_shift topk_swap down_scale lm_head_scale router_gate}
FAULTS_FP8=${FAULTS_FP8:-kv_norm rope_shift}
T0=$(date +%s); el() { echo "[elapsed $(( $(date +%s) - T0 )) s] $*" | tee -a "$L/summary.txt"; }
has() { [[ " $PARTS " == *" $1 "* ]]; }
source test/kernels/glm53/h200_env.sh
if has pre; then
  B=(); for k in tokens dense indexer shared; do for kv in bf16 fp8; do B+=("$k:|4|$kv||||1|$CTX"); done; done
  B+=("tail:|4|bf16||||1|$CTX")
  timeout 200 python3 $G/precompile.py --deadline 10 --jobs 6 --builds "${B[@]}" > "$L/precompile.log" 2>&1
  el "pre rc=$?: $(grep -c FAILED "$L/precompile.log") failed"
fi
if has bf16; then
  timeout 220 python3 $G/audit_step.py --kv bf16 --faults $FAULTS_BF16 --out "$L" > "$L/audit_bf16.log" 2>&1
  el "audit bf16 rc=$? $(tail -1 "$L/audit_bf16.log" | cut -c1-400)"
fi
if has fp8; then
  timeout 140 python3 $G/audit_step.py --kv fp8 --faults $FAULTS_FP8 --out "$L" > "$L/audit_fp8.log" 2>&1
  el "audit fp8 rc=$? $(tail -1 "$L/audit_fp8.log" | cut -c1-400)"
fi
if has report; then
  cat "$L"/audit_*_clean.jsonl > "$OUT/audit_clean.jsonl" 2>/dev/null
  ls "$L"/audit_*.jsonl | grep -v _clean.jsonl | xargs cat > "$OUT/audit_faults.jsonl" 2>/dev/null
  { python3 -m sgl_amd_mono.cli check-report "$OUT/audit_clean.jsonl" --plot "$OUT/audit_clean.png"
    for f in "$L"/audit_*.jsonl; do case $f in *_clean.jsonl) continue;; esac
      echo "== $(basename "$f")"; python3 -m sgl_amd_mono.cli check-report "$f" --plot "$L/$(basename "$f" .jsonl).png" \
        | grep -v " 0 of " ; done
    grep -h "^kv .* -> \|^audit_step" "$L"/audit_bf16.log "$L"/audit_fp8.log
    cat "$L/summary.txt"; } > "$OUT/summary.txt" 2>&1
  el "report: $(head -1 "$OUT/summary.txt")"
fi
tar czf "$OUT/logs.tgz" -C "$(dirname "$L")" "$(basename "$L")"
