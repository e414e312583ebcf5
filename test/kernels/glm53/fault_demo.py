"""A missed wait in a serving build stops the process with a GPU fault (check_step.py --fault-demo).

The child (`fault_child`) builds the launches as a server does (`spec.SPEC`'s build options: on_error "fault"),
then plants one missed arrival: the tail's launch rebuilt with SKIP_ARRIVE at its first stage (no program arrives,
so every program's wait passes its deadline). The routed step is captured in a CUDA graph through SGLang's binding
(after an eager warm-up on the healthy tail) and replayed. The first failing program writes the error word's host
copy and stores to address 0x0: the replay faults, the CUDA context dies, and `FaultWatch` logs the host copy.
The parent (`judge`) requires: a non-zero exit, the log line naming the tail launch, its stage and program, a CUDA
fault in the child's error, and no logits printed.
"""

from __future__ import annotations

import dataclasses
import time

import torch

from _triton_step_main import DsaCaches, make_step, routed, step_key

HEALTHY = "LOGITS CAME BACK"


def fault_child(model, cfg) -> None:
    from sglang.kernels.plugin_kernels.amd.spec import BuildContext
    from sglang.srt.model_executor.forward_context import ForwardContext, forward_context

    from sgl_amd_mono.backends.triton import kinds
    from sgl_amd_mono.backends.triton.tiles import Tiles
    from sgl_amd_mono.glm53.config import Glm53Geometry
    from sgl_amd_mono.glm53.runner_triton import layer_weights
    from sgl_amd_mono.glm53.spec import SPEC
    from sgl_amd_mono.glm53.weights import bind_model

    geo = Glm53Geometry.from_hf(cfg)
    ctx = BuildContext(isa="sm_90", widths=(1,), deadline_s=10.0, copies={})  # check_step's: precompiled builds
    built = SPEC.build(model, cfg, ctx)  # the server's build: a failed wait faults
    s = dict(tokens=1, ids=[5], seq_lens=[4096], pad_rows=0, capture=False)
    caches = DsaCaches(geo, kv_dtype=torch.bfloat16, bs=1, max_ctx=4100, seed=3, device="cuda")
    batch, backend, pos = make_step(caches, seq_lens=s["seq_lens"], tokens=1, input_ids=torch.tensor(s["ids"]))
    with routed(model, built, SPEC, [step_key(s)]), forward_context(ForwardContext(attn_backend=backend)):
        model.forward(batch.input_ids, pos, batch)  # eager warm-up on the healthy launches
        torch.cuda.synchronize()
        tail = built.plans[1]["tail"]
        bad = kinds.plan("tail", geo, tp=1, width=1, kv_dtype=torch.bfloat16, device="cuda",
                         options=dataclasses.replace(tail.options, skip_arrive=0), tiles=Tiles())
        _, tail_w, _ = layer_weights(geo, bind_model(model, geo), model.lm_head.weight)
        built.plans[1]["tail"], built.bound[1]["tail"] = bad, bad.bind(tail_w, launch_id=geo.n_layers)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            out = model.forward(batch.input_ids, pos, batch)
        print(f"captured the routed step with the planted missed arrival (deadline {ctx.deadline_s} s); replaying",
              flush=True)
        t0 = time.time()
        g.replay()
        try:
            torch.cuda.synchronize()
        finally:
            print(f"synchronize returned or raised after {time.time() - t0:.1f} s", flush=True)
        print(HEALTHY, float(out.next_token_logits.float().sum()), flush=True)


def judge(r) -> dict:
    """The child's outcome (a CompletedProcess) against what a serving build must do."""
    log = r.stdout + r.stderr
    fault = [ln for ln in log.splitlines() if "faulted at address 0x0" in ln]
    cuda_error = [ln for ln in log.splitlines() if "illegal" in ln.lower() or "CUDA error" in ln]
    fails = []
    if r.returncode == 0:
        fails.append("the child exited 0")
    if not fault or not all(x in fault[0] for x in ("tail", "stage", "program")):
        fails.append("no log line names the faulting launch, stage and program")
    if not cuda_error:
        fails.append("no CUDA fault in the child's error")
    if HEALTHY in log:
        fails.append("logits came back")
    return {"returncode": r.returncode, "fault_log": fault[:1], "cuda_error": cuda_error[:2],
            "tail_of_log": log.splitlines()[-6:], "failures": [f"fault demo: {f}" for f in fails]}
