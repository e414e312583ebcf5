"""Oracle stages of the MoE half (norm2 ... down), one torch function a stage of `halves.MOE_STAGES`.

Conventions as `oracle_attention.py`. The fused expert is expert E. A program's used-expert list
(`uniq` row p) is the used experts ascending, then E; entries past it are stale (left as they are). The
used count n_u (E included) is read back from the list: the position of its first E, plus one.
"""

from __future__ import annotations

import torch

from sgl_amd_mono.backends import reference as ref
from sgl_amd_mono.glm53.kinds.oracle_attention import gemv_parts, put_quant, rank_sum, sum_parts


def list_len(uniq: torch.Tensor, e: int) -> int:
    """Entries of program 0's `uniq` list [.., MAXU + 1] up to its first E (the fused expert) included."""
    hit = (uniq.reshape(-1, uniq.shape[-1])[0] == e).nonzero()
    if not hit.numel():
        raise ValueError(f"uniq {uniq.tolist()} lists no fused expert {e}")
    return int(hit[0, 0]) + 1


def n_used(uniq: torch.Tensor, e: int) -> int:
    """The used experts up, act and down run (the shared one included): the list's length, at most MAXU (as
    the launch clamps it; a real routing never has more)."""
    return min(list_len(uniq, e), uniq.shape[-1] - 1)


def renorm(rw: torch.Tensor, d) -> torch.Tensor:
    """[R] f32: each row's routing renormalisation, routed_scaling / (its sum of picked scores + 1e-20)."""
    return d.routed_scaling / (rw[: d.E, : d.R].sum(dim=0) + 1e-20)


# ---------------- stages ----------------
def norm2(b: dict, d) -> None:
    """xn2 = RMSNorm(o + res1) (bf16), quantized into xq2 / xs2."""
    xn2, _ = ref.rms_norm(b["o"], b["post_norm"], d.eps, b["res1"])
    b["xn2"].copy_(xn2)
    put_quant(b, xn2, "xq2", "xs2")


def gate(b: dict, d) -> None:
    """lg_part[k] = the f32 router logits of the bf16 gate over k part k (as layer.route's x @ gate^T)."""
    nkb = d.D // ref.GROUP // d.tiles.ks_g
    x, g = b["xn2"].float(), b["gate"].float()
    for k in range(d.tiles.ks_g):
        ks = slice(k * nkb * ref.GROUP, (k + 1) * nkb * ref.GROUP)
        b["lg_part"][k].copy_(x[:, ks] @ g[:, ks].t())


def route(b: dict, d) -> None:
    """expert_ids = reference.biased_topk's picks (rank order, E last); rw[e, r] = sigmoid score of e if
    row r picked it else 0, rw[E, r] = 1 (rows r < R; the rest untouched)."""
    logits = sum_parts(b["lg_part"])
    _, ids = ref.biased_topk(logits, b["bias"], top_k=d.TOPK, routed_scaling=d.routed_scaling, n_fused=1)
    b["expert_ids"].copy_(ids)
    rw = b["rw"]
    rw[:, : d.R] = 0.0
    picked = ids[:, : d.TOPK].long()
    rows = torch.arange(d.R, device=rw.device)[:, None].expand_as(picked)
    rw[picked, rows] = logits.sigmoid().gather(1, picked)
    rw[d.E, : d.R] = 1.0


def up(b: dict, d) -> None:
    """uniq[p] = the used experts (rw != 0 for some row) ascending, then E, for every program p;
    up_part[u * KS_U + k] = gate | up split-K part k of used expert u (f32)."""
    used = (b["rw"][: d.E, : d.R] != 0).any(dim=1).nonzero().flatten()
    lst = torch.cat((used, torch.tensor([d.E], device=used.device))).to(torch.int32)[: d.MAXU + 1]
    b["uniq"][:, : lst.numel()] = lst
    n_u = min(lst.numel(), d.MAXU)
    ks = d.tiles.ks_u
    for u in range(n_u):
        e = int(lst[u])
        b["up_part"][u * ks: (u + 1) * ks].copy_(gemv_parts(b["xq2"], b["xs2"], b["w13"][e], b["w13_s"][e], ks))


def act(b: dict, d) -> None:
    """aq[u] / as[u] = SiLU(bf16 gate) * bf16 up of used expert u, quantized, the group scales times each
    row's routing weight (routed: rw x renorm; shared: rw[E] = 1); expert_weights = the rows' picked
    scores x renorm, 1 for the fused expert."""
    rw, uniq = b["rw"], b["uniq"]
    scale = renorm(rw, d)
    ks = d.tiles.ks_u
    for u in range(n_used(uniq, d.E)):
        e = int(uniq[0, u])
        a = ref.silu_and_mul(sum_parts(b["up_part"][u * ks: (u + 1) * ks]).to(torch.bfloat16))
        q, s = ref.group_quant_fp8(a)
        wr = rw[e, : d.R] * scale if e < d.E else rw[d.E, : d.R]
        b["aq"][u].copy_(q)
        b["as"][u].copy_(s * wr[:, None])
    ids = b["expert_ids"][:, : d.TOPK].long()
    rows = torch.arange(d.R, device=rw.device)[:, None].expand_as(ids)
    b["expert_weights"][:, : d.TOPK] = rw[ids, rows] * scale[:, None]
    b["expert_weights"][:, d.TOPK] = 1.0


def down(b: dict, d) -> None:
    """dn_part[p] = sum over part p's used experts (the p-th of dn_parts runs of ceil(n_u / dn_parts), in
    order) of block_fp8_matmul(aq[u], as[u], w2[e_u]) (f32); out = bf16(sum of the parts in part order)
    (down's last-to-land tasks). One part: out = bf16(its sum), dn_part untouched (the launch's)."""
    uniq = b["uniq"]
    n_u, parts = n_used(uniq, d.E), d.tiles.dn_parts
    n_dn = -(-n_u // parts)
    sums = torch.zeros(parts, d.R, d.D, dtype=torch.float32, device=b["aq"].device)
    for p in range(parts):
        for u in range(p * n_dn, min(n_u, (p + 1) * n_dn)):
            e = int(uniq[0, u])
            sums[p] += ref.block_fp8_matmul(b["aq"][u], b["as"][u], b["w2"][e], b["w2_s"][e], out_dtype=torch.float32)
    if parts > 1:
        b["dn_part"].copy_(sums)
    b["out"].copy_(sum_parts(sums).to(torch.bfloat16))


def down_sum(b: dict, d) -> None:
    """TP > 1: out = every rank's MoE output (region out_x, this rank's exchange words) summed in rank order.
    TP 1: no tasks (down wrote out)."""
    if d.tp > 1:
        b["out"].copy_(rank_sum(b["out_x"], d))


STAGES = {"norm2": norm2, "gate": gate, "route": route, "up": up, "act": act, "down": down, "down_sum": down_sum}
