"""Oracle stages of the attention half (norm1 ... o_proj), one torch function a stage of `halves.ATTN_STAGES`.

Each `fn(b, d)` reads its stage's `reads` from the buffer dict `b` and writes its `writes` in place, in the
table's shapes and dtypes (`oracle.py` lists the layouts). Built from `backends/reference.py`'s ops and
`layer._absorb` (the ops pinned to SGLang); the launch's own orders are kept where they are a buffer's
definition: split-K parts are `reference.block_fp8_matmul` on the part's k slice (f32), summed in part order
0, 1, ... by their consumer (`sum_parts`), as the launch's consumers do.
"""

from __future__ import annotations

import torch

from sgl_amd_mono.backends import reference as ref
from sgl_amd_mono.glm53.layer import _absorb

G = ref.GROUP
NEG = -1.0e30  # a split's max when none of its slots is valid (the launch's NEG)


# ---------------- helpers shared with oracle_moe ----------------
def sum_parts(parts: torch.Tensor) -> torch.Tensor:
    """[P, ...] f32 -> the f32 sum in part order 0, 1, ... (the order every launch consumer sums parts)."""
    acc = parts[0].clone()
    for k in range(1, parts.shape[0]):
        acc = acc + parts[k]
    return acc


def gemv_parts(xq: torch.Tensor, xs: torch.Tensor, w: torch.Tensor, ws: torch.Tensor, n_parts: int) -> torch.Tensor:
    """Split-K parts of a block-FP8 GEMV: [n_parts, R, N] f32, part k = block_fp8_matmul over k blocks
    k*NKB .. (k+1)*NKB - 1 (NKB = K/128/n_parts). xq [R, K] fp8, xs [R, K/128] f32, w [N, K] fp8,
    ws [ceil(N/128), K/128] f32."""
    nkb = xq.shape[1] // G // n_parts
    out = []
    for k in range(n_parts):
        ks, kb = slice(k * nkb * G, (k + 1) * nkb * G), slice(k * nkb, (k + 1) * nkb)
        out.append(ref.block_fp8_matmul(xq[:, ks].contiguous(), xs[:, kb].contiguous(), w[:, ks].contiguous(),
                                        ws[:, kb].contiguous(), out_dtype=torch.float32))
    return torch.stack(out)


def put_quant(b: dict, x: torch.Tensor, q_name: str, s_name: str) -> None:
    """x [R, K] -> b[q_name] fp8, b[s_name] group scales (per_token_group_quant_fp8 numerics)."""
    q, s = ref.group_quant_fp8(x)
    b[q_name].copy_(q)
    b[s_name].copy_(s)


def cache_view(kv: torch.Tensor, d) -> torch.Tensor:
    """The cache as its logical dtype (SGLang stores an fp8 cache as uint8)."""
    return kv.view(d.kv_dtype) if kv.dtype == torch.uint8 else kv


# ---------------- stages ----------------
def norm1(b: dict, d) -> None:
    """res1 = bf16(hidden + residual); xq1 / xs1 = RMSNorm(hidden + residual) quantized."""
    x, res1 = ref.rms_norm(b["hidden"], b["input_norm"], d.eps, b["residual"])
    b["res1"].copy_(res1)
    put_quant(b, x, "xq1", "xs1")


def qkv_a(b: dict, d) -> None:
    b["qkv_part"].copy_(gemv_parts(b["xq1"], b["xs1"], b["qkv_a"], b["qkv_a_s"], d.tiles.ks_a))


def latent(b: dict, d) -> None:
    """ql = q_a_norm(bf16 q), quantized; the rows' cache rows at out_loc = [kv_a_norm(c_kv) | rope(k_pe)]."""
    qkv = sum_parts(b["qkv_part"]).to(torch.bfloat16)
    q, c, pe = qkv.split([d.QL, d.KVL, d.ROPE], dim=-1)
    ql, _ = ref.rms_norm(q.contiguous(), b["q_a_norm"], d.eps)
    b["ql"].copy_(ql)
    put_quant(b, ql, "qlq", "qls")
    c, _ = ref.rms_norm(c.contiguous(), b["kv_a_norm"], d.eps)
    pe = ref.rope_interleaved(pe.reshape(d.R, 1, d.ROPE), b["cos_sin"]).view(d.R, d.ROPE)
    kv = cache_view(b["kv_cache"], d)
    kv[b["out_loc"].long()] = torch.cat((c, pe), dim=-1).to(kv.dtype)


def q_b(b: dict, d) -> None:
    b["qb_part"].copy_(gemv_parts(b["qlq"], b["qls"], b["q_b"], b["q_b_s"], d.tiles.ks_b))


def absorb(b: dict, d) -> None:
    """qcat = [bf16(q_nope) @ w_kc | rope(bf16(q_pe))] a head."""
    q = sum_parts(b["qb_part"]).to(torch.bfloat16).view(d.R, d.H, d.QK)
    q_nope, q_pe = q.split([d.NOPE, d.ROPE], dim=-1)
    b["qcat"].copy_(torch.cat((_absorb(q_nope, b["w_kc"], None), ref.rope_interleaved(q_pe, b["cos_sin"])), dim=-1))


def attn(b: dict, d) -> None:
    """Per (row, split, head) over the split's top-k positions sp*KTOP/NSPLIT ..: pm = max score (NEG if
    no valid slot), pl = sum exp(score - pm), pacc = sum exp(score - pm) * V (V: the first KVL dims)."""
    kv = cache_view(b["kv_cache"], d)
    slots = b["topk_slots"]
    valid = slots >= 0  # [R, KTOP]
    rows = kv[slots.clamp(min=0).long()].float()  # [R, KTOP, KVD]
    s = torch.einsum("rhd,rkd->rhk", b["qcat"].float(), rows) * d.softmax_scale  # [R, H, KTOP]
    sp = d.KTOP // d.NSPLIT
    s = s.view(d.R, d.H, d.NSPLIT, sp)
    vmask = valid.view(d.R, 1, d.NSPLIT, sp)
    m = s.masked_fill(~vmask, float("-inf")).amax(dim=-1)  # [R, H, NSPLIT]
    m = torch.where(torch.isfinite(m), m, torch.full_like(m, NEG))
    p = torch.where(vmask, torch.exp(s - m[..., None]), torch.zeros_like(s))
    acc = torch.einsum("rhsk,rskd->rhsd", p, rows[..., : d.KVL].view(d.R, d.NSPLIT, sp, d.KVL))
    b["pm"].copy_(m.permute(0, 2, 1))
    b["pl"].copy_(p.sum(dim=-1).permute(0, 2, 1))
    b["pacc"].copy_(acc.permute(0, 2, 1, 3))


def w_uv(b: dict, d) -> None:
    """The splits combined (softmax over all of them), bf16; vpart[kc] = its latent chunk kc @ w_vc (f32);
    v = bf16(sum of vpart in chunk order), quantized into vq / vs (w_uv's last-to-land task)."""
    pm, pl, pacc = b["pm"], b["pl"], b["pacc"]  # [R, NS, H], [R, NS, H], [R, NS, H, KVL]
    mx = pm.amax(dim=1, keepdim=True)
    wt = torch.exp(pm - mx)
    den = (wt * pl).sum(dim=1)  # [R, H]
    a = (wt[..., None] * pacc).sum(dim=1)  # [R, H, KVL]
    inv = torch.where(den > 0, 1.0 / den, torch.zeros_like(den))
    a = (a * inv[..., None]).to(torch.bfloat16).float()
    nkc = d.KVL // G
    for kc in range(nkc):
        ch = slice(kc * G, (kc + 1) * G)
        vp = torch.bmm(a[:, :, ch].transpose(0, 1), b["w_vc"][:, ch, :].float())  # [H, R, VH]
        b["vpart"][kc].copy_(vp.transpose(0, 1).reshape(d.R, d.HV))
    put_quant(b, sum_parts(b["vpart"]).to(torch.bfloat16), "vq", "vs")


def o_proj(b: dict, d) -> None:
    """o_part = split-K parts of o_proj(v); o = bf16(sum in part order); residual_out = bf16(o + res1)
    (o_proj's last-to-land tasks)."""
    b["o_part"].copy_(gemv_parts(b["vq"], b["vs"], b["o_proj"], b["o_proj_s"], d.tiles.ks_o))
    o = sum_parts(b["o_part"]).to(torch.bfloat16)
    b["o"].copy_(o)
    b["residual_out"].copy_((o.float() + b["res1"].float()).to(torch.bfloat16))


def word_values(words: torch.Tensor) -> torch.Tensor:
    """Exchange words (int64: epoch << 32 | f32 bits) -> their f32 values."""
    return (words & 0xFFFFFFFF).to(torch.int32).view(torch.float32)


def rank_sum(words: torch.Tensor, d) -> torch.Tensor:
    """A region's words [TP, R * D] summed over the ranks in rank order in f32, rounded to bf16: [R, D]."""
    vals = word_values(words).view(-1, d.R, d.D)
    acc = vals[0].clone()
    for p in range(1, vals.shape[0]):
        acc = acc + vals[p]
    return acc.to(torch.bfloat16)


def o_sum(b: dict, d) -> None:
    """TP > 1: o = every rank's o_proj output (region o_x, this rank's exchange words) summed in rank order;
    residual_out = bf16(o + res1). TP 1: no tasks (o_proj wrote both)."""
    if d.tp == 1:
        return
    o = rank_sum(b["o_x"], d)
    b["o"].copy_(o)
    b["residual_out"].copy_((o.float() + b["res1"].float()).to(torch.bfloat16))


STAGES = {"norm1": norm1, "qkv_a": qkv_a, "latent": latent, "q_b": q_b, "absorb": absorb, "attn": attn,
          "w_uv": w_uv, "o_proj": o_proj, "o_sum": o_sum}
