#!/usr/bin/env bash
# Nsight Compute's warp-state samples of one launch, by stage (ncu_stalls.py), on the GPU machine.
# PROFILES: 'kind:width:context ...' (default 'indexer:8:131072 shared:8:131072'); for each, the build is
# compiled, time_layers.py runs under ncu (one launch profiled, its 41st, with SourceCounters, WarpStateStats and
# SchedulerStats; clocks left alone), the source page is exported and ncu_stalls.py reads it with the build's cubin
# from Triton's cache. Outputs under $OUT: ncu_<kind>_w<width>_<context>.log (the run, ncu's summary sections and
# the stage table). From the repo root with .whl (SGLang's wheels) carried.
set -u; export PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=$HOME/.triton/cache; mkdir -p /tmp/site "${OUT:=out}"
python3 -c "import glob, zipfile; [zipfile.ZipFile(w).extractall('/tmp/site') for w in sorted(glob.glob('.whl/*.whl'))]"
G=test/kernels/glm53; export PYTHONPATH=$PWD:$PWD/$G:/tmp/site; T0=$(date +%s)
el() { echo "[elapsed $(( $(date +%s) - T0 )) s] $*"; }
for p in ${PROFILES:-indexer:8:131072 shared:8:131072}; do
  IFS=: read -r kind w c <<< "$p"; L=$OUT/ncu_${kind}_w${w}_$c.log; R=/tmp/ncu_${kind}_w${w}_$c
  shape=""; [ "$kind" = indexer ] && shape="--shape decode"
  { nvidia-smi --query-gpu=name --format=csv,noheader; ncu --version | tail -1; } > "$L" 2>&1
  timeout 200 python3 $G/precompile.py --kind "$kind" --jobs 1 --builds "|$w|bf16|||||$c" >> "$L" 2>&1
  # shellcheck disable=SC2086
  timeout 200 ncu --clock-control none -k "regex:${kind}_layer_kernel" --launch-skip 40 --launch-count 1 \
    --section SourceCounters --section WarpStateStats --section SchedulerStats -o "$R" \
    python3 $G/time_layers.py --kind "$kind" --tp 8 --widths "$w" --contexts "$c" $shape --no-perop --no-variants \
    >> "$L" 2>&1; el "$p ncu rc=$?"
  ncu -i "$R.ncu-rep" --page details --section WarpStateStats --section SchedulerStats >> "$L" 2>&1
  ncu -i "$R.ncu-rep" --page source --csv --print-source sass > "$R.csv" 2>> "$L"
  h=$(grep -o "'hash': '[0-9a-f]*'" "$L" | head -1 | cut -d"'" -f4)
  j=$(grep -rl "\"hash\": \"$h" "$TRITON_CACHE_DIR" --include="${kind}_layer_kernel.json" | head -1)
  us=$(grep -o "\]: launch [0-9.]*" "$L" | head -1 | awk '{print $3}')
  python3 $G/ncu_stalls.py --csv "$R.csv" --cubin "${j%.json}.cubin" --launch-us "$us" >> "$L" 2>&1
  el "$p stalls rc=$?"
done
