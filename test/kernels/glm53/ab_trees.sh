#!/usr/bin/env bash
# A/B of a launch kind between trees in one GPU run: time_layers of the kind, the same inputs (the same seeds),
# the trees in order and then in reverse (old, new, new, old for two) so drift shows, then one line a config and
# tree. TREES: 'name=path ...' (default 'old=.carry/old new=.', the working tree being new); each path a tree from
#   git archive <commit> sgl_amd_mono pyproject.toml $(git ls-files 'test/kernels/glm53/*.py') | tar -x -C <path>
# (on the CPU side, then carry those paths and .whl).
#   KIND=indexer WIDTHS="1 8" CONTEXTS="8192" EXTRA="--shape decode" bash test/kernels/glm53/ab_trees.sh
# PRE=1: every tree's builds compiled first, the trees' precompile.py in parallel (each with its own code, into the
# one Triton cache), so that no timed tree's run spends its timeout compiling.
# CHECK='tree ...': after the timing, check_layer.py of the kind in each of those trees (TP8, bf16, WIDTHS x
# CONTEXTS), and for the indexer kind check_topk.py at 8K / 128K (ab_check_<tree>.log, ab_topk_<tree>.log).
# Every tree must have time_layers.py's options used here. Outputs flat under $OUT (ab_<tree>_<i>.log).
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
KIND=${KIND:-indexer}; WIDTHS=${WIDTHS:-1 8}; CONTEXTS=${CONTEXTS:-8192}; EXTRA=${EXTRA:-}
TREES=${TREES:-old=${OLD:-$PWD/.carry/old} new=.}
export TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-$HOME/.triton/cache}  # SGLang's import would point it at its own
mkdir -p /tmp/site
python3 -c "import glob, zipfile; [zipfile.ZipFile(w).extractall('/tmp/site') for w in sorted(glob.glob('.whl/*.whl'))]"
G=test/kernels/glm53
T0=$(date +%s); el() { echo "[elapsed $(( $(date +%s) - T0 )) s] $*" | tee -a "$OUT/ab_summary.txt"; }
read -r -a FWD <<< "$TREES"; ORDER=("${FWD[@]}"); for ((j = ${#FWD[@]} - 1; j >= 0; j--)); do ORDER+=("${FWD[j]}"); done
# in_tree NAME=PATH SECONDS SCRIPT ARGS...: one of G's scripts run in that tree, its code first on the path
in_tree() {
  local root; root=$(cd "${1#*=}" && pwd); local t=$2 f=$3; shift 3
  (cd "$root" && PYTHONPATH="$root:$root/$G:/tmp/site" timeout "$t" python3 "$G/$f" "$@")
}
if [ -n "${PRE:-}" ]; then
  B=(); for w in $WIDTHS; do for c in $CONTEXTS; do B+=("|$w|bf16|||||$c"); done; done
  P=(); for nt in "${FWD[@]}"; do
    in_tree "$nt" 300 precompile.py --kind "$KIND" --jobs $(( 14 / ${#FWD[@]} )) --builds "${B[@]}" \
      > "$OUT/ab_pre_${nt%%=*}.log" 2>&1 &
    P+=($!)
  done
  for j in "${!FWD[@]}"; do wait "${P[j]}"; el "${FWD[j]%%=*} precompile rc=$?"; done
fi
i=0
for nt in "${ORDER[@]}"; do
  tree=${nt%%=*}
  # shellcheck disable=SC2086
  in_tree "$nt" 200 time_layers.py --kind "$KIND" --tp 8 --widths $WIDTHS --contexts $CONTEXTS --no-perop \
    --no-variants $EXTRA > "$OUT/ab_${tree}_$i.log" 2>&1
  el "$tree run $i rc=$?"
  i=$((i + 1))
done
grep -H "launch .* us, floor" "$OUT"/ab_*.log | sed 's/, floor.*//' | tee -a "$OUT/ab_summary.txt"
for tree in ${CHECK:-}; do
  nt=$(printf '%s\n' "${FWD[@]}" | grep "^$tree=") || { el "CHECK names $tree, not a tree of TREES"; continue; }
  # shellcheck disable=SC2086
  in_tree "$nt" 200 check_layer.py --kind "$KIND" --tp 8 --widths $WIDTHS --contexts $CONTEXTS --kv bf16 \
    --no-deadline > "$OUT/ab_check_$tree.log" 2>&1
  el "$tree check_layer rc=$?"; tail -2 "$OUT/ab_check_$tree.log" | tee -a "$OUT/ab_summary.txt"
  if [ "$KIND" = indexer ]; then
    in_tree "$nt" 200 check_topk.py --tp 8 --contexts 8192 131072 > "$OUT/ab_topk_$tree.log" 2>&1
    el "$tree check_topk rc=$?"; tail -1 "$OUT/ab_topk_$tree.log" | tee -a "$OUT/ab_summary.txt"
  fi
done
