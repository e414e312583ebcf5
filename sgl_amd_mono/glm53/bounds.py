"""Every GLM-5.3 bound table and the comparison it is for. Each bound is named `<kind>.<output>.<metric>`
(`common/numerics`: max_abs, where 0 is bitwise; rel; max_rel; cosine, a lower bound; missed, a list's share
of another's entries it lacks), set at about 3x the
largest value measured where it is used, and ships with a planted error that fails it.

The comparisons:
  * launch vs oracle: a launch kind against the torch oracle of the same layer on the same inputs
    (`kinds/<kind>.py` BOUNDS_GPU: `test/kernels/glm53/check_layer.py` on a GPU; BOUNDS_INTERP: under
    Triton's interpreter, per case, `test/unit/test_launch_interp.py`), and stage by stage (`kinds/oracle.py`
    STAGE_BOUNDS under the interpreter, STAGE_BOUNDS_GPU with `check_layer.py --stop-after`);
  * a launch's scores vs an f64 reference over its own index queries and keys, with its list's rule
    (`kinds/indexer.py` TOPK_BOUNDS_GPU / TOPK_BOUNDS_INTERP, `test/kernels/glm53/check_topk.py`);
  * oracle vs SGLang: the torch oracle against SGLang's own modules and torch references on CPU
    (`reference_bounds.BOUNDS`, `reference.<output>.<metric>`; `test/unit/test_reference_pinned.py`);
  * serving vs SGLang: each served layer's launch against SGLang's path on its own inputs, the auditor
    (`audit.py`, SGLANG_AMD_MONO_CHECK=1): `AUDIT_BOUNDS_INTERP` under Triton's interpreter (measured,
    `test/unit/test_audit.py`), `SERVING_VS_SGLANG` on a GPU (the spec's `Numerics`, measured on the H200;
    `SERVING_UNBOUNDED` the one metric reported but not bounded, and why).
"""

from __future__ import annotations

from sgl_amd_mono.glm53 import reference_bounds
from sgl_amd_mono.glm53.kinds import dense, indexer, oracle, shared, tail

# The auditor's bounds on a GPU (SPEC.numerics), <kind>.<output>.<metric> as `audit.metric_names` reports them, each
# failed by the fault `audit.FAULT_OF_GPU` names. Set from the auditor's H200 run (results/audit2_h200_summary.txt,
# results/audit2_h200_clean.jsonl and audit2_h200_faults.jsonl: GLM-5.3's real shapes at TP1, layers 0-6 and the
# tail, random weights, bf16 and fp8 KV; decode of 3 requests and a pad row, MTP verify of 2 x 2 rows, 8K keys; every
# part on the launch's own inputs; against sglang-triton-kernels): ~3x the largest value (a cosine's distance from 1
# tripled) of the clean runs and of the fault runs whose fault is not in that part's path. The cache rows and index
# keys are written by the same stages in every kind, so one bound covers every kind (the worst kind's value); the
# cache-row, index-key, top-k and tail values are the first run's (results/audit1, since replaced), which this run
# repeated to the last digit.
SERVING_VS_SGLANG = {
    # MLA cache rows: clean <= 0.125 (fp8 KV, dense and shared; bf16 KV <= 0.031); kv_norm gives 0.656-1.0
    **{f"{k}.kv.max_abs": 0.375 for k in ("tokens", "dense", "indexer", "shared")},
    # clean >= 0.99998637 (dense, fp8 KV, layer 2 verify); rope_shift gives 0.9905-0.9949 (kv_norm 0.9964-0.9971)
    **{f"{k}.kv.cosine": 0.99996 for k in ("tokens", "dense", "indexer", "shared")},
    # index keys: clean >= 0.99973865 (tokens, layer 0, both KV dtypes); rope_shift gives 0.9568-0.9878
    **{f"{k}.index_k.cosine": 0.9992 for k in ("tokens", "dense", "indexer")},
    # SGLang's list against the launch's, keys of 2048 (SGLang's Numerics takes max_abs, rel and cosine only, so a
    # count rather than check_layer's fraction): the launch's fp8 scores and SGLang's trade keys at the threshold,
    # clean <= 26 (indexer layer 6; tokens 24, dense 19) and 27 in kv_norm's run (dense layer 2); rope_shift gives
    # 146-169 (topk_swap's one key, 17 at most, hides among the trades: it fails topk_own)
    **{f"{k}.topk_missed.max_abs": 81.0 for k in ("tokens", "dense", "indexer")},
    # a row's own draft-chain keys: 0 in every clean row; topk_swap gives 1
    **{f"{k}.topk_own.max_abs": 0.0 for k in ("tokens", "dense", "indexer")},
    # the attention output over the list the launch read (the launch's, in both paths): clean <= 0.0454 (fp8 KV,
    # every kind alike: SGLang's sparse-MLA decode on the fp8 cache; bf16 <= 0.0216), 0.0462 in kv_norm's fp8 run;
    # rope_shift, in o's path, gives 0.098-0.104; o_proj_scale gives 0.2008-0.2021
    **{f"{k}.o.rel": 0.14 for k in ("tokens", "dense", "indexer", "shared")},
    # the MoE or dense MLP on the launch's o_proj output and routing: clean <= 0.00278 (shared; indexer 0.00273:
    # SGLang's fused-MoE kernel with its bf16 gate | up against the launch's), dense 3.0e-4, tokens 1.1e-4; the other
    # faults' runs up to 4.6e-4 (dense, o_proj_scale) and 7.3e-4 (tokens, kv_norm); down_scale gives 0.2001-0.2002
    "tokens.out.rel": 2.2e-3, "dense.out.rel": 1.4e-3, "indexer.out.rel": 8.3e-3, "shared.out.rel": 8.3e-3,
    # the layer's output stream (hidden + residual) against SGLang's on the launch's inputs: clean >= 1 - 1.0e-6
    # (shared, fp8), rope_shift's runs >= 1 - 1.8e-6; down_scale gives <= 1 - 9.6e-4 (o_proj_scale <= 1 - 3.7e-4)
    **{f"{k}.streams.cosine": 1 - 5.4e-6 for k in ("tokens", "dense", "indexer", "shared")},
    # SGLang's router on the launch's post-attention norm output against the launch's routing: the experts equal
    # in every clean row and every other fault's; router_gate gives 8 (ids) and 0.315 (weights). Weights: clean
    # <= 8.9e-8, 1.5e-7 in down_scale's and kv_norm's runs (one f32 step)
    **{f"{k}.expert_ids.max_abs": 0.0 for k in ("indexer", "shared")},
    **{f"{k}.expert_weights.max_abs": 4.5e-7 for k in ("indexer", "shared")},
    # the tail: clean 0 (bitwise), but 4.4e-4 in o_proj_scale's and down_scale's runs, whose tails see other inputs;
    # lm_head_scale gives 0.0205
    "tail.logits.rel": 1.3e-3,
}
# The auditor's GPU metrics not bounded (reported), <output>.<metric> -> why.
SERVING_UNBOUNDED = {
    "index_k.max_abs": "3x the clean 0.25 (one fp8 step of a key, tokens layer 0) is 0.75, which rope_shift's 0.375-"
                       "0.547 does not fail; index_k.cosine bounds the keys",
}

# The auditor under Triton's interpreter: the largest value of each metric measured in its clean runs (the tiny model
# of every kind through SGLang's binding on CPU, against cpu-modules: a decode step of 2 requests and a pad row and
# an MTP verify of 2 x 2 rows, with a bf16 and with an fp8 MLA cache; `test/unit/test_audit.py`, Triton 3.8,
# torch 2.14), and in the fault runs whose fault leaves that part as it is (the part sees other inputs, still the
# launch's own). 0 (or a cosine within 2.3e-16 of 1) is bitwise. Where not bitwise: the verify step's attention (the
# launch's online softmax against the reference's one pass, as in the tokens kind's interpreter cases), the shared
# layer's attention over the launch's top-k list, whose threshold key comes last (the radix rule) where SGLang's path
# reads the list as it comes (fp8 cache, decode), the routing weights (one f32 step: the launch multiplies by the
# reciprocal of the sum, the reference divides), and the indexer layer's MoE on o_proj_scale's inputs.
AUDIT_MEASURED_INTERP = {
    "tokens.o.rel": 2.08e-3,  # bf16 verify, row 3
    "dense.o.rel": 5.89e-3,  # bf16 verify (fp8: 4.38e-3)
    "indexer.o.rel": 0.0,
    "shared.o.rel": 3.79e-4,  # fp8 decode, row 1 (a row of 150 keys: its list's threshold key last)
    **{f"{k}.out.rel": 0.0 for k in ("tokens", "dense", "shared")},  # on the launch's o: bitwise
    "indexer.out.rel": 2.1e-5,  # 0 clean; o_proj_scale's run, row 2 (the MoE on the launch's scaled o)
    "tokens.streams.cosine": 1 - 1.9e-9,  # bf16 verify
    "dense.streams.cosine": 1 - 8.2e-8,  # fp8 verify (bf16: 1 - 3.1e-8)
    **{f"{k}.streams.cosine": 1 - 2.3e-16 for k in ("indexer", "shared")},
    **{f"{k}.expert_ids.max_abs": 0.0 for k in ("indexer", "shared")},
    # 1.2e-7 clean (one f32 step); 2.4e-7 in down_scale's run (indexer, row 1)
    **{f"{k}.expert_weights.max_abs": 2.4e-7 for k in ("indexer", "shared")},
    **{f"{k}.kv.max_abs": 0.0 for k in ("tokens", "dense", "indexer", "shared")},
    **{f"{k}.kv.cosine": 1 - 2.3e-16 for k in ("tokens", "dense", "indexer", "shared")},
    **{f"{k}.index_k.max_abs": 0.0 for k in ("tokens", "dense", "indexer")},
    **{f"{k}.index_k.cosine": 1 - 2.3e-16 for k in ("tokens", "dense", "indexer")},
    **{f"{k}.topk_missed.max_abs": 0.0 for k in ("tokens", "dense", "indexer")},
    **{f"{k}.topk_own.max_abs": 0.0 for k in ("tokens", "dense", "indexer")},
    "tail.logits.rel": 0.0,
}


def three_x(name: str, measured: float) -> float:
    """A bound at 3x a measured value (a cosine's distance from 1 tripled); a bitwise one stays exact, a cosine
    within 1e-12 of 1 (f64 rounding of an identical row's cosine; the least fault here moves one 2e-6)."""
    if name.endswith(".cosine"):
        return 1.0 - max(3.0 * (1.0 - measured), 1e-12)
    return 3.0 * measured


# the planted fault that fails each (`audit.FAULT_OF`; test_audit.py runs each on the decode step): o_proj_scale gives
# o.rel 0.20, kv_norm kv.max_abs 0.56-0.67, rope_shift kv.cosine <= 0.99965, index_k.max_abs >= 0.375,
# index_k.cosine <= 0.989 and streams.cosine <= 1 - 1.4e-6, topk_swap topk_missed / topk_own 1, down_scale out.rel
# 0.20, router_gate expert_ids 2 and expert_weights >= 1.37, lm_head_scale logits.rel 0.021
AUDIT_BOUNDS_INTERP = {name: three_x(name, v) for name, v in AUDIT_MEASURED_INTERP.items()}

# A whole step of the Triton backend through SGLang's binding, launches under Triton's interpreter, against the
# reference backend on an identical pool (test/unit/test_triton_step.py: the tiny model's tokens, dense, indexer and
# shared layers and the tail). Decode with a pad row: bitwise (0 on every metric). MTP verify (2 x 2 rows): layers 0
# and 1 write exact cache rows, then one rounding upstream (the attention's online softmax against the oracle's one,
# as in the tokens kind's interpreter cases) moves layer 2's rows; measured logits 2.0e-3, hidden 1.2e-3, MLA cache
# 0.0156 (one bf16 step), index keys 0.125 (one fp8 step); the bounds are ~3x. The planted errors (one row's logits
# or hidden state x1.02, a cache value +0.1, an index-key value +1) fail them.
STEP_BOUNDS_INTERP = {"step.logits.rel": 6e-3, "step.hidden.rel": 4e-3, "step.kv.max_abs": 0.05,
                      "step.index_k.max_abs": 0.4}
# With an fp8 MLA cache (SGLang's --kv-cache-dtype fp8_e4m3): decode bitwise again; verify measured logits 1.5e-3,
# hidden 1.2e-3, MLA cache 0.25 (one fp8 step at 2-4, where the bf16 cache's was one bf16 step), index keys 0.125:
# the cache bound is ~3 fp8 steps, and its planted error a value +1.
STEP_BOUNDS_INTERP_FP8 = dict(STEP_BOUNDS_INTERP, **{"step.kv.max_abs": 0.75})
# A whole step at TP 2 (two processes, SGLang's TP 2 shards, the launches exchanging their partials) against the
# reference backend at TP 1 on the same checkpoint (test_triton_step_tp.py, bf16 KV): the ranks are bitwise equal,
# and each layer at TP 2 is bitwise the oracle's at TP 2 (test_tp_launch.py: the ranks' bf16 partials summed in rank
# order), so what is left is TP 2's own rounding against TP 1's (o_proj's, the MoE's and the MLP's partial sums each
# rounded to bf16 before the sum). Measured decode / verify: logits 7.2e-3 / 5.9e-3, hidden 4.9e-3, MLA cache
# 0.049 / 0.085 (a few bf16 steps at 2-4), index keys 0.25 (two fp8 steps); layer 0's rows exact. The bounds are
# ~2x; the planted errors (one row's logits or hidden state x1.1, a cache value +0.5, an index-key value +1) fail
# them.
STEP_TP2_BOUNDS_INTERP = {"step.logits.rel": 1.5e-2, "step.hidden.rel": 1e-2, "step.kv.max_abs": 0.17,
                          "step.index_k.max_abs": 0.5}

# The same comparison on the H200 (check_step.py --model tiny, through SGLang's model on CUDA): the interpreter's
# values, which the H200 run met (results/step1_h200_check_step.log: logits 2.1e-3 / 3.8e-3, MLA cache 0.016 / 0.047,
# index keys one fp8 step). At GLM-5.3's real shapes with random weights the reference moves as far from itself
# after a 1-ulp weight change as the launches are from it (results/step3_h200_summary.md), so there check_step holds
# layer 0's rows to the tokens kind's bounds instead (`check_step.failures`).
STEP_BOUNDS_GPU = dict(STEP_BOUNDS_INTERP)
STEP_BOUNDS_GPU_FP8 = dict(STEP_BOUNDS_INTERP_FP8)  # the tiny model with fp8 KV not yet run on a GPU: the interpreter's

# comparison -> {table name: bounds}
COMPARISONS = {
    "launch vs oracle (GPU)": {"shared": shared.BOUNDS_GPU, "indexer": indexer.BOUNDS_GPU, "tail": tail.BOUNDS_GPU,
                               "dense": dense.BOUNDS_GPU, "tokens": dense.TOKENS_BOUNDS_GPU},
    "launch vs oracle (interpreter, per case)": {"shared": shared.BOUNDS_INTERP, "indexer": indexer.BOUNDS_INTERP,
                                                 "tail": tail.BOUNDS_INTERP, "dense": dense.BOUNDS_INTERP,
                                                 "tokens": dense.TOKENS_BOUNDS_INTERP},
    "launch scores and top-k vs f64 scores (GPU)": {"indexer": indexer.TOPK_BOUNDS_GPU},
    "launch scores and top-k vs f64 scores (interpreter)": {"indexer": indexer.TOPK_BOUNDS_INTERP},
    "launch stage vs oracle stage (interpreter)": {"shared": oracle.STAGE_BOUNDS},
    "launch stage vs oracle stage (GPU)": {"shared": oracle.STAGE_BOUNDS_GPU},
    "whole step vs the reference backend (interpreter)": {"step": STEP_BOUNDS_INTERP, "step fp8 KV": STEP_BOUNDS_INTERP_FP8},
    "whole step at TP 2 vs the reference backend at TP 1 (interpreter)": {"step": STEP_TP2_BOUNDS_INTERP},
    "whole step vs the reference backend (GPU)": {"step": STEP_BOUNDS_GPU, "step fp8 KV": STEP_BOUNDS_GPU_FP8},
    "oracle vs SGLang (CPU)": {"reference": reference_bounds.BOUNDS},
    "serving vs SGLang, the auditor (GPU: SPEC.numerics)": {"spec": SERVING_VS_SGLANG},
    "serving vs SGLang, the auditor (interpreter)": {"audit": AUDIT_BOUNDS_INTERP},
}


def all_names() -> list[str]:
    """Every bound name of every table (flattening BOUNDS_INTERP's cases)."""
    out = []
    for tables in COMPARISONS.values():
        for t in tables.values():
            for k, v in t.items():
                out += list(v) if isinstance(v, dict) else [k]
    return out
