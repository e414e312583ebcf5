"""A whole GLM-5.3 step on the Triton backend on one GPU, through SGLang's real GlmMoeDsaForCausalLM and binding:
the tiny model of every kind (test/unit/_triton_step_main.py: tokens, dense, indexer, shared, tail) built, loaded
and post-processed by SGLang on CUDA (`../shared/examples/h200_sglang_model/`: sgl_kernel and deep_gemm as
import-only stand-ins, which raise if called), the launches compiled for it, each step against the reference
backend on an identical pool, and the routed step captured in a CUDA graph and replayed.

PYTHONPATH=$PWD:$PWD/test/unit:/tmp/site:<stubs> python test/kernels/glm53/check_step.py [--steps decode verify]
Prints the JSON result; exit 1 when a value is outside its bound, a planted error passes, or a replay differs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "unit"))


def cuda_sglang():
    """SGLang's single-process groups and a published CUDA ServerArgs (the h200_sglang_model recipe)."""
    import tiny_glm53 as tg
    from sglang.srt.distributed import parallel_state
    from sglang.srt.distributed.parallel_state import init_distributed_environment, initialize_model_parallel
    from sglang.srt.runtime_context import SpawnRanks, get_parallel, publish, reset_context
    from sglang.srt.server_args import ServerArgs

    for k, v in (("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", "29633"), ("RANK", "0"), ("WORLD_SIZE", "1"),
                 ("LOCAL_RANK", "0")):
        os.environ.setdefault(k, v)
    init_distributed_environment(world_size=1, rank=0, local_rank=0, backend="gloo")
    reset_context()
    publish(ServerArgs(model_path="dummy", tp_size=1, ep_size=1, pp_size=1, device="cuda"), role="test",
            ranks=SpawnRanks(world_rank=0))
    if parallel_state._WORLD is not None:
        get_parallel().override_permanently(world_group=parallel_state._WORLD)
    initialize_model_parallel(backend="gloo")
    tg._IS_DIST_READY = True


def build_cuda_model(overrides: dict):
    import tiny_glm53 as tg
    from sglang.srt.layers.quantization.fp8 import Fp8Config
    from sglang.srt.model_loader.loader import DefaultModelLoader
    from sglang.srt.models.glm4_moe import GlmMoeDsaForCausalLM

    cfg = tg.tiny_hf_config(**overrides)
    qc = Fp8Config(is_checkpoint_fp8_serialized=True, activation_scheme="dynamic", weight_block_size=[128, 128])
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device("cuda"):
            model = GlmMoeDsaForCausalLM(cfg, quant_config=qc)
        model.load_weights(iter({k: v.cuda() for k, v in tg.checkpoint_tensors(cfg, is_fp8=True).items()}.items()))
        DefaultModelLoader.postprocess_weights(model, torch.device("cuda"))
    finally:
        torch.set_default_dtype(previous)
    return model.eval(), cfg


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", nargs="+", default=["decode"])
    p.add_argument("--replays", type=int, default=20)
    a = p.parse_args()
    import _triton_step_main as tsm
    from sgl_amd_mono.common import numerics as nm
    from sgl_amd_mono.glm53.bounds import STEP_BOUNDS_INTERP

    t0 = time.time()
    cuda_sglang()
    model, cfg = build_cuda_model(tsm.LAUNCH_TINY)
    print(f"SGLang's model built on CUDA in {time.time() - t0:.1f} s", flush=True)
    t1 = time.time()
    res = tsm.run(model, cfg, device="cuda", isa="sm_90", steps={k: tsm.STEPS[k] for k in a.steps}, replays=a.replays)
    print(f"built and ran in {time.time() - t1:.1f} s", flush=True)
    print(json.dumps(res))
    bad = []
    for name, r in res["steps"].items():
        bad += [f"{name} {k} = {v}" for k, v in r["values"].items()
                if k in STEP_BOUNDS_INTERP and not nm.passes(k, v, STEP_BOUNDS_INTERP[k])]
        bad += [f"{name} control {k} = {v} passes" for k, v in r["controls"].items()
                if nm.passes(k, v, STEP_BOUNDS_INTERP[k])]
        bad += [f"{name} top-1 {r['values']['step.logits.top1']}"] if r["values"]["step.logits.top1"] != 1.0 else []
    bad += [f"{k} replays differ" for k, same in res.get("replays_equal", {}).items() if not same]
    print("check_step:", "; ".join(bad) if bad else "0 failures (the interpreter's step bounds)")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
