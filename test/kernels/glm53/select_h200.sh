#!/usr/bin/env bash
# One H200 run for the select's tile options (sel1's lists, emit's tiles) and the standing figures of the defaults.
# PART picks one (each fits one device call; outputs flat under $OUT):
#   specs     each tile spec in $SPECS (space-separated, e.g. "index_compact=2 index_compact=4") timed beside the
#             defaults in one process, TP8, a decode row a request, rows 1 / 2 / 4 / 8, 8K / 128K; PROBE=1 first
#             runs probe_select_steps.py (emit in [256, k] tiles beside its steps)
#   standing  both kinds timed in one run with SGLang's per-op path (the indexer beside each tile spec in $SPECS, if
#             any), each on a decode row a request (the targets' shape), then check_topk at 8K / 128K / 300K (not
#             with TOPK=0)
#   standing2 check_layer at rows 1 / 2 (TP8 bf16 8K / 128K, fp8 KV 8K, TP1 8K), then both kinds timed twice,
#             alternated (indexer, shared, indexer, shared), no per-op path
#   checks    check_layer at rows 1 / 2 / 4 / 8 (TP8 bf16 8K / 128K, fp8 KV 8K), TP1 rows 1 / 2 / 4 at 8K, then the
#             dense kind (the indexer's front) at rows 1 / 2 / 4 / 8 (TP8 bf16 8K)
#   topk      check_topk at 8K / 128K / 300K, then check_layer at TP1 bf16 8K: the indexer at 4 rows, the tokens kind
#             (the indexer's front) at rows 1 / 2 / 4
#   traces    the indexer kind traced at 8K 1 row and 128K 8 rows (trace_8k.log, trace_128k.log)
#   width     each tile spec in $SPECS beside the defaults in one process at width $W alone (TP8, a decode row a
#             request, 8K / 128K); a spec equal to the defaults (e.g. index_scan=0) last times them again
#   speccheck each tile spec in $SPECS beside the defaults in one process at widths $WS (default 1 4 8; TP8, a decode
#             row a request, 8K / 128K), then check_layer of $TILES at rows $CW (default 1 8; TP8 bf16 8K / 128K) and
#             check_topk of $TILES at 128K / 300K ($SHAPES: check_topk's shapes, default all)
# TILES (checks, topk, speccheck): a tile spec the checks build and run instead of the defaults.
# From the repo root with .whl (SGLang's wheels) carried.
set -u; export PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=$HOME/.triton/cache; mkdir -p /tmp/site "${OUT:=out}"
python3 -c "import glob, zipfile; [zipfile.ZipFile(w).extractall('/tmp/site') for w in sorted(glob.glob('.whl/*.whl'))]"
G=test/kernels/glm53; export PYTHONPATH=$PWD:$PWD/$G:/tmp/site; T0=$(date +%s)
el() { echo "[elapsed $(( $(date +%s) - T0 )) s] $*"; }
TL=${TILES:+--tiles $TILES}  # the checks' tile spec (PART checks, topk)
B=(); S=(); for w in 1 2 4 8; do for c in 8192 131072; do B+=("|$w|bf16|||||$c"); done; S+=("|$w|bf16"); done
case "${PART:-specs}" in
specs)
  [ -n "${PROBE:-}" ] && { python3 $G/probe_select_steps.py --shapes 8x131072 4x131072 1x131072 1x8192 --scans 512 \
    --rows-k 2 4 8 > $OUT/probe.log 2>&1; el "probe rc=$?"; }
  for w in 1 2 4 8; do for c in 8192 131072; do for s in ${SPECS}; do B+=("$s|$w|bf16|||||$c"); done; done; done
  timeout 300 python3 $G/precompile.py --kind indexer --jobs 15 --builds "${B[@]}" > $OUT/pre.log 2>&1; el "pre rc=$?"
  timeout 300 python3 $G/time_layers.py --kind indexer --tp 8 --widths 1 2 4 8 --contexts 8192 131072 --shape decode \
    --no-perop --no-variants --specs ${SPECS} > $OUT/specs.log 2>&1; el "specs rc=$?"
  grep -E "\]: launch|bandwidth" $OUT/specs.log | cut -c1-60 ;;
standing)
  B+=("|4|bf16|||||300000" "|8|bf16|||||300000")
  for w in 1 2 4 8; do for c in 8192 131072; do for s in ${SPECS:-}; do B+=("$s|$w|bf16|||||$c"); done; done; done
  timeout 200 python3 $G/precompile.py --kind indexer --jobs 12 --builds "${B[@]}" > $OUT/pre.log 2>&1 &
  timeout 200 python3 $G/precompile.py --kind shared --jobs 4 --builds "${S[@]}" > $OUT/pre_shared.log 2>&1 &
  wait; el "pre"
  timeout 250 python3 $G/time_layers.py --kind indexer --tp 8 --widths 1 2 4 8 --contexts 8192 131072 --shape decode \
    --no-variants ${SPECS:+--specs $SPECS} > $OUT/time_indexer.log 2>&1; el "time indexer rc=$?"
  timeout 120 python3 $G/time_layers.py --kind shared --tp 8 --widths 1 2 4 8 --contexts 8192 131072 --no-perop \
    --shape decode --no-variants > $OUT/time_shared.log 2>&1; el "time shared rc=$?"
  [ "${TOPK:-1}" = 0 ] && exit 0
  timeout 150 python3 $G/check_topk.py --tp 8 --contexts 8192 131072 300000 > $OUT/check_topk.log 2>&1
  el "check_topk rc=$?"; tail -1 $OUT/check_topk.log ;;
standing2)
  B+=("|1|fp8|||||8192" "|2|fp8|||||8192" "|1|bf16||||1|8192" "|2|bf16||||1|8192")
  timeout 150 python3 $G/precompile.py --kind indexer --jobs 12 --builds "${B[@]}" > $OUT/pre.log 2>&1 &
  timeout 150 python3 $G/precompile.py --kind shared --jobs 4 --builds "${S[@]}" > $OUT/pre_shared.log 2>&1 &
  wait; el "pre"
  timeout 80 python3 $G/check_layer.py --kind indexer --tp 8 --widths 1 2 --contexts 8192 131072 --kv bf16 \
    --no-deadline > $OUT/check_layer_12.log 2>&1; el "check bf16 rc=$?"
  timeout 60 python3 $G/check_layer.py --kind indexer --tp 8 --widths 1 2 --contexts 8192 --kv fp8 --no-deadline \
    > $OUT/check_layer_fp8_12.log 2>&1; el "check fp8 rc=$?"
  timeout 60 python3 $G/check_layer.py --kind indexer --tp 1 --widths 1 2 --contexts 8192 --kv bf16 --no-deadline \
    > $OUT/check_layer_tp1_12.log 2>&1; el "check tp1 rc=$?"
  for i in 1 2; do
    timeout 60 python3 $G/time_layers.py --kind indexer --tp 8 --widths 1 2 4 8 --contexts 8192 131072 --shape decode \
      --no-perop --no-variants > $OUT/time_indexer_$i.log 2>&1; el "time indexer $i rc=$?"
    timeout 80 python3 $G/time_layers.py --kind shared --tp 8 --widths 1 2 4 8 --contexts 8192 131072 --no-perop \
      --shape decode --no-variants > $OUT/time_shared_$i.log 2>&1; el "time shared $i rc=$?"
  done
  grep -E "^\| (8192|131072) " $OUT/time_indexer_*.log $OUT/time_shared_*.log | cut -c1-60 ;;
checks)
  for w in 1 2 4 8; do B+=("|$w|fp8|||||8192"); done
  for w in 1 2 4; do B+=("|$w|bf16||||1|8192"); done
  for w in 1 2 4 8; do B+=("dense:|$w|bf16|||||8192"); done  # one pool: two ran out of GPU memory
  B=("${B[@]/|/${TILES:-}|}")
  timeout 200 python3 $G/precompile.py --kind indexer --jobs 12 --builds "${B[@]}" > $OUT/pre.log 2>&1; el "pre rc=$?"
  timeout 150 python3 $G/check_layer.py --kind indexer --tp 8 --widths 1 2 4 8 --contexts 8192 131072 --kv bf16 \
    $TL --no-deadline > $OUT/check_layer_tp8.log 2>&1; el "check tp8 rc=$?"
  timeout 90 python3 $G/check_layer.py --kind indexer --tp 8 --widths 1 2 4 8 --contexts 8192 --kv fp8 $TL \
    --no-deadline > $OUT/check_layer_fp8.log 2>&1; el "check fp8 rc=$?"
  timeout 90 python3 $G/check_layer.py --kind indexer --tp 1 --widths 1 2 4 --contexts 8192 --kv bf16 $TL \
    --no-deadline > $OUT/check_layer_tp1.log 2>&1; el "check tp1 rc=$?"
  timeout 150 python3 $G/check_layer.py --kind dense --tp 8 --widths 1 2 4 8 --contexts 8192 --kv bf16 $TL \
    --no-deadline > $OUT/check_layer_dense.log 2>&1; el "check dense rc=$?"
  tail -qn1 $OUT/check_layer_*.log ;;
topk)
  B=("|4|bf16|||||300000" "|8|bf16|||||300000" "|4|bf16||||1|8192"); for w in 1 2 4; do B+=("tokens:|$w|bf16||||1|8192"); done
  B=("${B[@]/|/${TILES:-}|}")
  timeout 150 python3 $G/precompile.py --kind indexer --jobs 5 --builds "${B[@]}" > $OUT/pre.log 2>&1; el "pre rc=$?"
  timeout 200 python3 $G/check_topk.py --tp 8 --contexts 8192 131072 300000 $TL > $OUT/check_topk.log 2>&1
  el "check_topk rc=$?"; tail -1 $OUT/check_topk.log
  timeout 60 python3 $G/check_layer.py --kind indexer --tp 1 --widths 4 --contexts 8192 --kv bf16 $TL \
    --no-deadline > $OUT/check_layer_tp1_w4.log 2>&1; el "check tp1 w4 rc=$?"; tail -1 $OUT/check_layer_tp1_w4.log
  timeout 90 python3 $G/check_layer.py --kind tokens --tp 1 --widths 1 2 4 --contexts 8192 --kv bf16 $TL \
    --no-deadline > $OUT/check_layer_tokens.log 2>&1; el "check tokens rc=$?"; tail -1 $OUT/check_layer_tokens.log ;;
traces)
  B=("|1|bf16|||1||8192" "|8|bf16|||1||131072")
  timeout 200 python3 $G/precompile.py --kind indexer --jobs 2 --builds "${B[@]}" > $OUT/pre.log 2>&1; el "pre rc=$?"
  timeout 60 python3 $G/time_layers.py --kind indexer --tp 8 --trace 1 --contexts 8192 --shape decode \
    > $OUT/trace_8k.log 2>&1; el "trace 8k rc=$?"
  timeout 60 python3 $G/time_layers.py --kind indexer --tp 8 --trace 8 --contexts 131072 --shape decode \
    > $OUT/trace_128k.log 2>&1; el "trace 128k rc=$?" ;;
width)
  B=(); for c in 8192 131072; do for s in "" ${SPECS}; do B+=("$s|$W|bf16|||||$c"); done; done
  timeout 240 python3 $G/precompile.py --kind indexer --jobs 15 --builds "${B[@]}" > $OUT/pre.log 2>&1; el "pre rc=$?"
  timeout 120 python3 $G/time_layers.py --kind indexer --tp 8 --widths $W --contexts 8192 131072 --shape decode \
    --no-perop --no-variants --specs ${SPECS} > $OUT/specs_w$W.log 2>&1; el "w$W rc=$?"
  grep -E "\]: launch|bandwidth" $OUT/specs_w$W.log | cut -c1-70 ;;
speccheck)
  WS=${WS:-"1 4 8"}; CW=${CW:-"1 8"}; B=()
  for w in $WS; do for c in 8192 131072; do for s in "" $SPECS; do B+=("$s|$w|bf16|||||$c"); done; done; done
  for w in 4 8; do B+=("${TILES:-}|$w|bf16|||||300000"); done
  timeout 280 python3 $G/precompile.py --kind indexer --jobs 16 --builds "${B[@]}" > $OUT/pre.log 2>&1; el "pre rc=$?"
  timeout 200 python3 $G/time_layers.py --kind indexer --tp 8 --widths $WS --contexts 8192 131072 --shape decode \
    --no-perop --no-variants --specs $SPECS > $OUT/specs.log 2>&1; el "specs rc=$?"
  grep -E "\]: launch" $OUT/specs.log | sed -E 's/, floor.*//'
  timeout 120 python3 $G/check_layer.py --kind indexer --tp 8 --widths $CW --contexts 8192 131072 --kv bf16 $TL \
    --no-deadline > $OUT/check_layer.log 2>&1; el "check_layer rc=$?"; tail -1 $OUT/check_layer.log
  timeout 150 python3 $G/check_topk.py --tp 8 --contexts 131072 300000 ${SHAPES:+--shapes $SHAPES} $TL \
    > $OUT/check_topk.log 2>&1; el "topk rc=$?"; tail -1 $OUT/check_topk.log ;;
*) echo "PART ${PART} is not one of specs, standing, standing2, checks, topk, traces, width, speccheck" >&2; exit 2 ;;
esac
