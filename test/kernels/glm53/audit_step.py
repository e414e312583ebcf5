"""The auditor (SGLANG_AMD_MONO_CHECK=1) on one GPU, through SGLang's real GlmMoeDsaForCausalLM and binding: GLM-5.3 at
its real shapes, TP 1, layers 0-6 and the tail (`check_step.py --model real`'s model: random weights drawn on the GPU,
loaded and post-processed by SGLang), every layer's launch against SGLang's Triton kernels (`audit_provider.py`'s
sglang-triton-kernels, `per_op.py`).

For one KV dtype a process (--kv; SGLang publishes its server args once), `test/unit/_audit_main.run`: a build
without the variable (the auditor not imported) and its steps; a clean check build (its logits and cache rows must
equal the unchecked ones); then a build with each planted fault of --faults (SGLANG_AMD_MONO_FAULT) on the decode
step. Steps, width 4: decode of 3 requests (--context, --context - 64 and 1000 keys: a row of fewer than 2048 keys
lists its own key, which topk_swap takes) and a pad row; MTP verify of 2 requests x 2 draft rows (--context - 4 and
1000), hidden states captured. Each build's report is OUT/audit_<kv>_<run>.jsonl; prints one JSON line of the
summaries, then a line a fault's metric: its clean worst -> its worst under the fault, and whether 3x the clean worst
would be failed (what the bounds `bounds.SERVING_VS_SGLANG` lacks are set from). Exit 1 when the clean run has a
violation of SPEC.numerics, a bounded metric is within its bound under its fault (`audit.FAULT_OF_GPU`), or check
mode changed a logit or cache row.

PYTHONPATH=$PWD:$PWD/test/unit:$PWD/test/kernels/glm53:/tmp/site:<stubs> python test/kernels/glm53/audit_step.py \
    --kv bf16 --out OUT
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from typing import Optional

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "unit"))


def audit_steps(kv: torch.dtype, context: int, vocab: int) -> dict:
    g = torch.Generator().manual_seed(context)
    ids = lambda n: torch.randint(0, vocab, (n,), generator=g).tolist()  # noqa: E731
    return {"decode": dict(kv=kv, seq_lens=[context, context - 64, 1000], tokens=1, ids=ids(3) + [0], pad_rows=1,
                           capture=False),
            "verify": dict(kv=kv, seq_lens=[context - 4, 1000], tokens=2, ids=ids(4), pad_rows=0, capture=True)}


def judge(res: dict, *, fault_of: Optional[dict] = None) -> tuple[list[str], list[str]]:
    """(what fails the run, the measurement bounds are set from). Fails: check mode changed a logit or cache row,
    the clean run has a violation, or a bounded metric is within its bound under its fault (`fault_of`, default
    `audit.FAULT_OF_GPU`; each fault this process ran). Notes: each fault's metrics, clean worst -> fault worst, and
    whether 3x the clean worst (`bounds.three_x`) would be failed by the fault: what an unbounded metric's bound is
    set from. A metric unbounded in SPEC.numerics (not yet measured) is noted, not failed."""
    from sgl_amd_mono.common import numerics as nm
    from sgl_amd_mono.glm53 import audit
    from sgl_amd_mono.glm53.bounds import three_x

    fault_of = audit.FAULT_OF_GPU if fault_of is None else fault_of
    bad = [f"check mode changed step {k}'s logits or cache rows" for k, same in res["same_as_unchecked"].items()
           if not same]
    clean = res["runs"]["clean"]
    bad += [f"clean: {n} {clean['metrics'][n]['worst']:.4g} outside {clean['metrics'][n]['bound']}"
            for n in clean["violations_by_metric"]]
    notes = []
    for fault, r in res["runs"].items():
        if fault == "clean":
            continue
        for n in sorted(n for n in r["metrics"] if fault_of[n.split(".", 1)[1]] == fault):
            was, got, bound = clean["metrics"][n]["worst"], r["metrics"][n]["worst"], r["metrics"][n]["bound"]
            x3 = three_x(n, was)
            verdict = "NOT failed" if nm.passes(n, got, x3) else "failed"
            notes.append(f"{fault}: {n} clean {was:.6g} -> {got:.6g}; 3x clean {x3:.6g} {verdict}"
                         f"{'' if bound is not None else ' (unbounded)'}")
            if bound is not None and not r["violations_by_metric"].get(n):
                bad.append(f"fault {fault}: {n} {got:.6g} within its bound {bound}")
    return bad, notes


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--kv", choices=("bf16", "fp8"), default="bf16")
    p.add_argument("--context", type=int, default=8192)
    p.add_argument("--faults", nargs="*", default=None, help="default: every planted fault (audit.FAULTS)")
    p.add_argument("--out", default="out")
    a = p.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    import _audit_main
    from check_step import build_cuda_model, cuda_sglang, real_overrides

    from sgl_amd_mono.glm53 import audit

    faults = tuple(audit.FAULTS) if a.faults is None else tuple(a.faults)
    os.makedirs(a.out, exist_ok=True)
    t0 = time.time()
    cuda_sglang(a.kv)
    model, cfg = build_cuda_model(real_overrides())
    print(f"SGLang's model (real) built on CUDA in {time.time() - t0:.1f} s, "
          f"{torch.cuda.memory_allocated() / 2**30:.1f} GiB", flush=True)
    kvd = torch.float8_e4m3fn if a.kv == "fp8" else torch.bfloat16
    steps = audit_steps(kvd, a.context, cfg.vocab_size)
    t1 = time.time()
    res = _audit_main.run(model, cfg, steps=steps, fault_steps={"decode": steps["decode"]}, faults=faults,
                          device="cuda", isa="sm_90", report_dir=a.out, tag=f"_{a.kv}")
    print(f"kv {a.kv}: {len(res['runs'])} check builds ran in {time.time() - t1:.1f} s", flush=True)
    print(json.dumps({a.kv: res}), flush=True)
    bad, notes = judge(res)
    print("\n".join(f"kv {a.kv} {n}" for n in notes), flush=True)
    print(f"audit_step {a.kv}:", "; ".join(bad) if bad else "0 failures (clean: 0 violations; every fault caught)")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
