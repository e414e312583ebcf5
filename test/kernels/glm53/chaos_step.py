"""How far a 1-ulp change moves the reference's own whole step (check_step.py --chaos): the same step on the
reference backend twice, on identical pools, the second with one bf16 ulp added to one element of layer 0's input
norm weight (a change far below any rounding either backend makes). With random weights nothing damps a rounding
difference through the layers' block-FP8 requantizations, so this is the distance two correct implementations of
the step can be apart; the launches' distance to the reference is read against it."""

from __future__ import annotations

import torch

from _triton_step_main import DsaCaches, make_step, reference_step
from sgl_amd_mono.common import numerics as nm


def chaos(model, geo, ref, s: dict, *, device, seed: int = 4) -> dict:
    from sglang.srt.model_executor.forward_context import ForwardContext, forward_context

    w = model.model.layers[0].input_layernorm.weight.data
    keep = w[0].clone()
    outs, pools = [], []
    for perturb in (False, True):
        c = DsaCaches(geo, kv_dtype=s["kv"], bs=len(s["seq_lens"]) + s["pad_rows"],
                      max_ctx=max(256, max(s["seq_lens"]) + s["tokens"] + 1), seed=seed, device=device)
        if perturb:
            w.view(torch.int16)[0] += 1  # one bf16 ulp away from zero (the weight is ~1, positive)
        batch, backend, pos = make_step(c, seq_lens=s["seq_lens"], tokens=s["tokens"], input_ids=torch.tensor(s["ids"]),
                                        pad_rows=s["pad_rows"], capture_hidden=s["capture"])
        with forward_context(ForwardContext(attn_backend=backend)):
            outs.append(reference_step(ref, s, batch, pos))
        w[0] = keep
        pools.append((c, batch.out_cache_loc))
    live = len(s["seq_lens"]) * s["tokens"]
    a, b = (o.next_token_logits[:live] for o in outs)
    loc = pools[0][1][:live]
    kv = [nm.max_abs(pools[0][0].pool.get_key_buffer(i).view(-1, geo.kv_cache_dim)[loc].float(),
                     pools[1][0].pool.get_key_buffer(i).view(-1, geo.kv_cache_dim)[loc].float())
          for i in range(geo.n_layers)]
    return {"step.logits.rel": nm.rel(a, b), "step.logits.top1": float((a.argmax(-1) == b.argmax(-1)).float().mean()),
            "step.kv.max_abs": max(kv), "kv_per_layer": kv}
