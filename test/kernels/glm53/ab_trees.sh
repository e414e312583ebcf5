#!/usr/bin/env bash
# A/B of a launch kind between two trees in one H200 run: time_layers of the kind, the same inputs (the same
# seeds), alternating the trees (old, new, new, old) so drift shows, then one line a config and tree.
#   git worktree add .carry/old <commit>     (on the CPU side, then carry .carry/old and .whl)
#   KIND=indexer WIDTHS="1 8" CONTEXTS="8192" EXTRA="--shape decode" bash test/kernels/glm53/ab_trees.sh
# Both trees must have time_layers.py's options used here. Outputs flat under $OUT (ab_<tree>_<i>.log).
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
KIND=${KIND:-indexer}; WIDTHS=${WIDTHS:-1 8}; CONTEXTS=${CONTEXTS:-8192}; EXTRA=${EXTRA:-}
OLD=${OLD:-$PWD/.carry/old}
export TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-$HOME/.triton/cache}  # SGLang's import would point it at its own
mkdir -p /tmp/site
python3 -c "import glob, zipfile; [zipfile.ZipFile(w).extractall('/tmp/site') for w in sorted(glob.glob('.whl/*.whl'))]"
G=test/kernels/glm53
T0=$(date +%s); el() { echo "[elapsed $(( $(date +%s) - T0 )) s] $*" | tee -a "$OUT/ab_summary.txt"; }
i=0
for tree in old new new old; do
  root=$PWD; [ $tree = old ] && root=$OLD
  # shellcheck disable=SC2086
  (cd "$root" && PYTHONPATH="$root:$root/$G:/tmp/site" timeout 200 python3 $G/time_layers.py --kind "$KIND" --tp 8 \
     --widths $WIDTHS --contexts $CONTEXTS --no-perop --no-variants $EXTRA) > "$OUT/ab_${tree}_$i.log" 2>&1
  el "$tree run $i rc=$?"
  i=$((i + 1))
done
grep -H "launch .* us, floor" "$OUT"/ab_*.log | sed 's/, floor.*//' | tee -a "$OUT/ab_summary.txt"
