#!/usr/bin/env bash
# The TP launches' processes path on ONE H200: tp_step.py under torchrun, 2 processes (one a rank) both on cuda:0
# (LOCAL_RANK % device_count), each building its own rank's launches over its shard of one full draw of GLM-5.3's
# real shapes, the two sharing their peer buffers through CUDA IPC handles. TP 2, width 1, 8K context, one layer of
# each kind (tokens, dense, indexer, shared) and the tail; bf16 KV; deadline 10 s.
#
# What two processes on one GPU can show: the processes' path end to end (torchrun, the gloo setup, the all-or-nothing
# peer setup, CUDA IPC handles exported by one process and opened by the other, the pushes of one process landing in
# the other's buffer, rank order and epochs across two CUDA contexts), the ranks bitwise equal, every layer against
# its oracle at TP 2 within the GPU bounds, 20 CUDA-graph replays of a cross-process step bitwise equal to the eager
# step, and a held rank ending every rank's step with error words naming the stage and the peer. What it cannot show:
# NVLink (every push lands in the one GPU's own memory), peer access between GPUs (the IPC handle is opened on the
# same device), a rank's speed (without MPS the two processes' kernels only time-slice: each hand-off waits for the
# other context's slice, so steps are slow but bounded by the deadline; nothing here is timed), and TP 4 / 8.
#
# PARTS picks (default "pre step held symm"), each while BUDGET seconds (default 570, from the start) last:
#   pre    precompile the five kinds' TP 2 width-1 builds (precompile.py, deadline 10 s: the same compiled signature)
#   step   tp_step.py --peers cuda_ipc: checks, 20 replays          -> $OUT/tp_step_h200.json
#   held   tp_step.py --hold-rank 1 (rank 1 starts 11 s late)       -> $OUT/tp_step_h200_held.json
#   symm   tp_step.py --peers symmetric, tokens only: what the platform does with torch's symmetric memory (over an
#          NCCL group) for two processes on one GPU; a refusal is the expected answer, recorded as it comes
#                                                                      -> $OUT/tp_step_h200_symm.json
# From the repo root, no carry (no SGLang needed). Logs: $OUT/tp_step_h200.log (everything, with the platform's
# compute mode and MPS state), $OUT/tp_step_precompile.log. At most 5 files under $OUT.
set -u
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:-out}; mkdir -p "$OUT"; PARTS=${PARTS:-pre step held symm}; BUDGET=${BUDGET:-570}
LOG=$OUT/tp_step_h200.log
T0=$(date +%s); el() { echo "[elapsed $(( $(date +%s) - T0 )) s] $*" | tee -a "$LOG"; }
has() { [[ " $PARTS " == *" $1 "* ]]; }
left() { echo $(( BUDGET - ($(date +%s) - T0) - 5 )); }
cap() { local l; l=$(left); echo $(( l < $1 ? l : $1 )); }
export TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-$HOME/.triton/cache}
G=test/kernels/glm53
export PYTHONPATH="$PWD:$PWD/$G:${PYTHONPATH:-}"
{ nvidia-smi --query-gpu=name,compute_mode,driver_version --format=csv
  echo "MPS control daemon: $(pgrep -f nvidia-cuda-mps-control >/dev/null && echo running || echo 'not running')"
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, 'GPUs', torch.cuda.device_count())"
} >> "$LOG" 2>&1
TP_STEP=(python3 -m torch.distributed.run --standalone --nproc-per-node 2 $G/tp_step.py --device cuda --deadline 10
         --width 1 --context 8192)
if has pre; then
  B=(); for k in tokens dense indexer shared tail; do B+=("$k:|1|bf16||||2|8192"); done
  timeout "$(cap 240)" python3 $G/precompile.py --deadline 10 --jobs 5 --builds "${B[@]}" > "$OUT/tp_step_precompile.log" 2>&1
  el "pre rc=$?: $(grep -c FAILED "$OUT/tp_step_precompile.log") failed; $(tail -1 "$OUT/tp_step_precompile.log")"
fi
run() {  # run NAME CAP ARGS...: one tp_step.py run, its JSON result under $OUT
  local name=$1 c=$2; shift 2
  if (( $(left) < 60 )); then el "$name: not run (budget)"; return; fi
  echo "=== $name: ${TP_STEP[*]} $*" >> "$LOG"
  timeout "$(cap "$c")" "${TP_STEP[@]}" --out "$OUT/tp_step_h200_$name.json" "$@" >> "$LOG" 2>&1
  el "$name rc=$? $(python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print('ok' if r['ok'] else 'FAILED', \
r.get('seconds'), '; '.join(r['failures'])[:600])" "$OUT/tp_step_h200_$name.json" 2>/dev/null || echo 'no result')"
}
has step && run step 240 --peers cuda_ipc --replays 20
has held && run held 200 --peers cuda_ipc --hold-rank 1
has symm && run symm 100 --peers symmetric --layers tokens --replays 0
[[ -f "$OUT/tp_step_h200_step.json" ]] && mv "$OUT/tp_step_h200_step.json" "$OUT/tp_step_h200.json"
el "done"
