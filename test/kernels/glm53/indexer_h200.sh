#!/usr/bin/env bash
# One H200 run of the indexer kind beside the shared kind. PARTS picks (default "pre check trace time topk"):
#   pre    precompile every build the parts below use (the indexer's defaults at $PRE_WIDTHS rows, default 1 2 4 8;
#          the shared kind's only with time)
#   probe  probe_score.py (the score loop alone) at $PROBE_IBLK keys a step (default 128 256) for $PROBE_VARIANTS
#   blocking  check_topk's 8K case of several requests and recent keys with CUDA_LAUNCH_BLOCKING=1
#   check  check_layer --kind indexer at TP8 rows 1 / 2 / 4 / 8, 8K, bf16 (every control)
#   more   check_layer at 128K rows 1 / 8 bf16, fp8 KV rows 1 / 2 / 4 / 8 at 8K, TP1 rows 1 / 2 / 4 at 8K (the widths
#          the spec builds at TP1)
#   trace  per-stage traces at rows 1 / 8 at 8K, 1 at 128K, a decode row a request; then at 8K rows 1 / 8 for each
#          tile spec in $SPECS (';'-separated, e.g. 'bn_iq=64,ks_iq=2;index_scan=256')
#   time   time_layers of both kinds in one run (1 / 2 / 4 / 8 rows, 8K and 128K; the indexer's a decode row a
#          request, with SGLang's per-op indexer path unless TIME_PEROP=0)
#   specs  each tile spec in $TIME_SPECS (';'-separated) timed beside the indexer's defaults in one process (an
#          A/B in one run) at $SPEC_WIDTHS rows (default 1 8) and $SPEC_CONTEXTS (default 8192)
#   topk   check_topk at $TOPK_CONTEXTS (default 8K, 128K and 300K) (every key cache, a draft chain and several requests)
#   (check, topk and more take $CHECK_TILES as tile overrides when set, e.g. CHECK_TILES=ks_w=16)
#   ab     the shared kind's A/B against commit a6c80a3 (.carry/old)
#   abtime the indexer's A/B between the trees of $TREES ('name=path ...', default 'old=.carry/old new=.': each
#          path from `git archive <commit> | tar -x -C <path>`): every tree's time builds precompiled, then
#          ab_trees.sh (the trees in order, then reversed) at $AB_WIDTHS (default 1 2 4 8) and $AB_CONTEXTS
#          (default 8192 131072), a decode row a request; $AB_SPEC: tile overrides for every tree
# From the repo root with .whl carried; outputs flat under $OUT.
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"; PARTS=${PARTS:-pre check trace time topk}
T0=$(date +%s); el() { echo "[elapsed $(( $(date +%s) - T0 )) s] $*" | tee -a "$OUT/idx_summary.txt"; }
has() { [[ " $PARTS " == *" $1 "* ]]; }
IFS=';' read -r -a TS <<< "${TIME_SPECS:-}"
# SGLang's import points TRITON_CACHE_DIR at its own cache when unset: fixed here, so that a script that imports
# SGLang (the per-op path) finds the builds precompile.py left
export TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-$HOME/.triton/cache}
mkdir -p /tmp/site
python3 -c "import glob, zipfile; [zipfile.ZipFile(w).extractall('/tmp/site') for w in sorted(glob.glob('.whl/*.whl'))]"
G=test/kernels/glm53
export PYTHONPATH="$PWD:$PWD/$G:/tmp/site:${PYTHONPATH:-}"
if has pre; then
  B=(); S=()
  for w in ${PRE_WIDTHS:-1 2 4 8}; do for c in 8192 131072; do B+=("|$w|bf16|||||$c"); done; S+=("|$w|bf16"); done
  IFS=';' read -r -a SP <<< "${SPECS:-}"
  has trace && { B+=("|1|bf16|||1||8192" "|8|bf16|||1||8192" "|1|bf16|||1||131072");
                 for s in "${SP[@]}"; do B+=("$s|1|bf16|||1||8192" "$s|8|bf16|||1||8192"); done; }
  CT=${CHECK_TILES:-}
  has more && B+=("$CT|1|fp8|||||8192" "$CT|2|fp8|||||8192" "$CT|4|fp8|||||8192" "$CT|8|fp8|||||8192"
                  "$CT|1|bf16||||1|8192" "$CT|2|bf16||||1|8192" "$CT|4|bf16||||1|8192")
  # with CHECK_TILES, the bf16 builds check and more use (else the time builds above are those)
  [ -n "$CT" ] && has check && for w in 1 2 4 8; do B+=("$CT|$w|bf16|||||8192"); done
  [ -n "$CT" ] && has more && B+=("$CT|1|bf16|||||131072" "$CT|8|bf16|||||131072")
  has specs && for s in "${TS[@]}"; do for w in ${SPEC_WIDTHS:-1 8}; do for c in ${SPEC_CONTEXTS:-8192}; do
    B+=("$s|$w|bf16|||||$c"); done; done; done
  has topk && for c in ${TOPK_CONTEXTS:-8192 131072 300000}; do B+=("$CT|4|bf16|||||$c" "$CT|8|bf16|||||$c"); done
  timeout 240 python3 $G/precompile.py --kind indexer --jobs 14 --builds "${B[@]}" > "$OUT/idx_precompile.log" 2>&1 &
  has time && timeout 240 python3 $G/precompile.py --kind shared --jobs 4 --builds "${S[@]}" \
    > "$OUT/idx_precompile_shared.log" 2>&1 &
  wait; el "precompile"
fi
if has probe; then
  timeout ${PROBE_S:-200} python3 $G/probe_score.py --keys 1024 8192 --iblk ${PROBE_IBLK:-128 256} \
    ${PROBE_VARIANTS:+--variants $PROBE_VARIANTS} > "$OUT/idx_probe_score.log" 2>&1; el "probe_score rc=$?"
fi
if has abtime; then
  AB=(); for w in ${AB_WIDTHS:-1 2 4 8}; do for c in ${AB_CONTEXTS:-8192 131072}; do AB+=("${AB_SPEC:-}|$w|bf16|||||$c"); done; done
  export TREES=${TREES:-old=.carry/old new=.}
  for nt in $TREES; do
    (cd "${nt#*=}" && PYTHONPATH="$PWD:$PWD/$G:/tmp/site" timeout 240 python3 $G/precompile.py --kind indexer \
       --jobs ${AB_JOBS:-8} --builds "${AB[@]}") > "$OUT/idx_precompile_${nt%%=*}.log" 2>&1 &
  done
  wait; el "precompile the trees ($TREES)"
  OUT="$OUT/ab" KIND=indexer WIDTHS="${AB_WIDTHS:-1 2 4 8}" CONTEXTS="${AB_CONTEXTS:-8192 131072}" \
    EXTRA="--shape decode ${AB_SPEC:+--tiles $AB_SPEC}" bash $G/ab_trees.sh > /dev/null 2>&1; el "ab_trees indexer rc=$?"
  cat "$OUT/ab/ab_summary.txt" >> "$OUT/idx_summary.txt"
fi
if has blocking; then  # the one case that faulted (8K, several requests, recent keys), each launch waited on
  CUDA_LAUNCH_BLOCKING=1 timeout 150 python3 $G/check_topk.py --tp 8 --contexts 8192 --shapes requests --keys recent \
    > "$OUT/idx_check_topk_blocking.log" 2>&1; el "check_topk blocking (8K requests recent) rc=$?"
fi
if has check; then
  timeout 240 python3 $G/check_layer.py --kind indexer --tp 8 --widths 1 2 4 8 --contexts 8192 --kv bf16 ${CHECK_TILES:+--tiles $CHECK_TILES} \
    > "$OUT/idx_check_tp8_8k.log" 2>&1; el "check indexer 8K rc=$?"
fi
if has trace; then
  timeout 120 python3 $G/time_layers.py --kind indexer --tp 8 --trace 1 8 --contexts 8192 --shape decode \
    > "$OUT/idx_trace_8192.log" 2>&1; el "trace indexer 8K rc=$?"
  timeout 120 python3 $G/time_layers.py --kind indexer --tp 8 --trace 1 --contexts 131072 --shape decode \
    > "$OUT/idx_trace_131072.log" 2>&1; el "trace indexer 128K rc=$?"
  IFS=';' read -r -a SP <<< "${SPECS:-}"
  i=0; for s in "${SP[@]}"; do
    timeout 120 python3 $G/time_layers.py --kind indexer --tp 8 --trace 1 8 --contexts 8192 --shape decode \
      --tiles "$s" > "$OUT/idx_trace_spec$i.log" 2>&1; el "trace indexer 8K '$s' rc=$?"; i=$((i + 1))
  done
fi
if has time; then
  PEROP=; [ "${TIME_PEROP:-1}" = 0 ] && PEROP=--no-perop
  timeout ${TIME_S:-240} python3 $G/time_layers.py --kind indexer --tp 8 --widths 1 2 4 8 --contexts 8192 131072 \
    --shape decode --no-variants $PEROP > "$OUT/idx_time_indexer.log" 2>&1; el "time indexer (decode${PEROP:+, no per-op}) rc=$?"
  timeout ${TIME_SHARED_S:-200} python3 $G/time_layers.py --kind shared --tp 8 --widths 1 2 4 8 --contexts 8192 131072 --no-perop \
    --shape decode --no-variants > "$OUT/idx_time_shared.log" 2>&1; el "time shared rc=$?"
fi
if has specs; then
  timeout ${SPECS_S:-200} python3 $G/time_layers.py --kind indexer --tp 8 --widths ${SPEC_WIDTHS:-1 8} \
    --contexts ${SPEC_CONTEXTS:-8192} --shape decode --no-perop --no-variants --specs "${TS[@]}" \
    > "$OUT/idx_time_specs.log" 2>&1; el "time indexer tile specs rc=$?"
fi
if has topk; then
  timeout ${TOPK_S:-300} python3 $G/check_topk.py --tp 8 --contexts ${TOPK_CONTEXTS:-8192 131072 300000} ${CHECK_TILES:+--tiles $CHECK_TILES} \
    > "$OUT/idx_check_topk.log" 2>&1
  el "check_topk rc=$?"
fi
if has more; then
  timeout 150 python3 $G/check_layer.py --kind indexer --tp 8 --widths 1 8 --contexts 131072 --kv bf16 --no-deadline ${CHECK_TILES:+--tiles $CHECK_TILES} \
    > "$OUT/idx_check_tp8_128k.log" 2>&1; el "check indexer 128K rc=$?"
  timeout 150 python3 $G/check_layer.py --kind indexer --tp 8 --widths 1 2 4 8 --contexts 8192 --kv fp8 --no-deadline ${CHECK_TILES:+--tiles $CHECK_TILES} \
    > "$OUT/idx_check_tp8_fp8.log" 2>&1; el "check indexer fp8 rc=$?"
  timeout 150 python3 $G/check_layer.py --kind indexer --tp 1 --widths 1 2 4 --contexts 8192 --kv bf16 --no-deadline ${CHECK_TILES:+--tiles $CHECK_TILES} \
    > "$OUT/idx_check_tp1.log" 2>&1; el "check indexer TP1 rc=$?"
fi
if has ab; then
  OLD="$PWD/.carry/old:/tmp/site"
  for t in OLD NEW; do
    P=$PYTHONPATH; [ $t = OLD ] && P=$OLD
    PYTHONPATH=$P timeout 150 python3 $G/ab_split.py time --reps 2 >> "$OUT/idx_ab_shared_time.log" 2>&1; el "ab $t rc=$?"
  done
  PYTHONPATH=$OLD timeout 100 python3 $G/ab_split.py digests "$OUT/idx_ab_digests_old.txt" > /dev/null 2>&1
  timeout 100 python3 $G/ab_split.py digests "$OUT/idx_ab_digests_new.txt" > /dev/null 2>&1
  cmp -s "$OUT/idx_ab_digests_old.txt" "$OUT/idx_ab_digests_new.txt" && el "shared digests: SAME BITS as a6c80a3" || el "shared digests: DIFFER"
fi
