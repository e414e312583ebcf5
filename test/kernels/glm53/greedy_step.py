"""A greedy decode loop on the Triton backend beside the reference backend, through SGLang's binding (check_step.py
--greedy): the stand-in for an accuracy run where no real weights exist.

One request; each step's token fed back. The fed token is the reference's top-1, so both backends stay on one
sequence and every step compares the same work; every 4th step is an MTP verify of the fed token and 3 random
drafts (accepted while the reference's top-1 chain matches them; the cache advances by the accepted rows + 1, the
rejected rows' cache entries are overwritten later, as SGLang's are). Per step: the logits' relative distance and
the rows' top-1 agreement.
"""

from __future__ import annotations

import torch

from _triton_step_main import DsaCaches, make_step, reference_step, routed, step_key
from sgl_amd_mono.common import numerics as nm


def greedy(model, geo, ref, built, spec, *, kv, context: int, n_tokens: int, device, drafts: int = 3,
           verify_every: int = 4, seed: int = 11) -> dict:
    from sglang.srt.model_executor.forward_context import ForwardContext, forward_context

    g = torch.Generator().manual_seed(seed)
    vocab = geo.vocab
    got_c, want_c = (DsaCaches(geo, kv_dtype=kv, bs=1, max_ctx=context + n_tokens + drafts + 2, seed=seed,
                               device=device) for _ in range(2))
    verify = dict(tokens=drafts + 1, ids=[0] * (drafts + 1), seq_lens=[0])
    decode = dict(tokens=1, ids=[0], seq_lens=[0])
    cur, tok, made, rows = context - 1, int(torch.randint(0, vocab, (1,), generator=g)), 0, []
    with routed(model, built, spec, [step_key(decode), step_key(verify)]):
        while made < n_tokens:
            is_verify = verify_every and len(rows) % verify_every == verify_every - 1
            d = torch.randint(0, vocab, (drafts,), generator=g).tolist() if is_verify else []
            s = dict(tokens=drafts + 1 if is_verify else 1, ids=[tok] + d, seq_lens=[cur if is_verify else cur + 1],
                     pad_rows=0, capture=bool(is_verify))
            outs = []
            for caches, which in ((got_c, "launch"), (want_c, "reference")):
                batch, backend, pos = make_step(caches, seq_lens=s["seq_lens"], tokens=s["tokens"],
                                                input_ids=torch.tensor(s["ids"]), pad_rows=0,
                                                capture_hidden=s["capture"])
                with forward_context(ForwardContext(attn_backend=backend)):
                    outs.append(model.forward(batch.input_ids, pos, batch) if which == "launch"
                                else reference_step(ref, s, batch, pos))
            built.check_error()
            gl, wl = outs[0].next_token_logits, outs[1].next_token_logits
            top_g, top_w = gl.argmax(-1).tolist(), wl.argmax(-1).tolist()
            accepted = 0
            while accepted < len(d) and top_w[accepted] == d[accepted]:
                accepted += 1
            rows.append({"mode": "verify" if is_verify else "decode", "rows": len(top_w), "position": cur, "token": tok,
                         "logits_rel": nm.rel(gl, wl), "top1": sum(x == y for x, y in zip(top_g, top_w)) / len(top_w),
                         "accepted": accepted})
            cur, tok, made = cur + accepted + 1, top_w[accepted], made + accepted + 1
    n = sum(r["rows"] for r in rows)
    return {"steps": rows, "tokens": made, "rows": n, "top1": sum(r["top1"] * r["rows"] for r in rows) / n,
            "rel_max": max(r["logits_rel"] for r in rows)}
