#!/usr/bin/env bash
# H200 A/B of the shared launch before (commit a6c80a3, its tree in .carry/old) and after the split into a
# stage table and stage functions: digests of every output on the same inputs, and µs per launch alternating
# the trees (old, new, new, old), each time_layers-style over 4 layers at 8K. Outputs flat under $OUT.
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-out}; mkdir -p "$OUT"
T0=$(date +%s); el() { echo "[elapsed $(( $(date +%s) - T0 )) s] $*" | tee -a "$OUT/ab_summary.txt"; }
mkdir -p /tmp/site
python3 -c "import glob, zipfile; [zipfile.ZipFile(w).extractall('/tmp/site') for w in sorted(glob.glob('.whl/*.whl'))]"
G=test/kernels/glm53
NEW="$PWD:$PWD/$G:/tmp/site"; OLD="$PWD/.carry/old:/tmp/site"
B=(); for w in 1 2 4 8; do B+=("|$w|bf16"); done; B+=("|4|fp8" "|8|fp8")
PYTHONPATH=$OLD timeout 150 python3 .carry/old/$G/precompile.py --jobs 6 --builds "${B[@]}" > "$OUT/ab_precompile_old.log" 2>&1 &
PYTHONPATH=$NEW timeout 150 python3 $G/precompile.py --jobs 6 --builds "${B[@]}" > "$OUT/ab_precompile_new.log" 2>&1 &
wait; el "precompile both trees"
PYTHONPATH=$OLD timeout 120 python3 $G/ab_split.py digests "$OUT/ab_digests_old.txt" > "$OUT/ab_digests.log" 2>&1
PYTHONPATH=$NEW timeout 120 python3 $G/ab_split.py digests "$OUT/ab_digests_new.txt" >> "$OUT/ab_digests.log" 2>&1
if cmp -s "$OUT/ab_digests_old.txt" "$OUT/ab_digests_new.txt"; then el "digests: SAME BITS ($(wc -l < "$OUT/ab_digests_new.txt") outputs)"
else el "digests: DIFFER"; diff "$OUT/ab_digests_old.txt" "$OUT/ab_digests_new.txt" >> "$OUT/ab_summary.txt"; fi
for t in OLD NEW NEW OLD; do
  PYTHONPATH=${!t} timeout 150 python3 $G/ab_split.py time --reps 3 >> "$OUT/ab_time.log" 2>&1
  el "time $t rc=$?"
done
