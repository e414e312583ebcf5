"""The tail kind's stages in Triton (`glm53/kinds/tail.py` is the table): the final RMSNorm and the bf16 LM head."""

import triton
import triton.language as tl

from sgl_amd_mono.backends.triton.exchange import push_slot
from sgl_amd_mono.backends.triton.sync import count_task, live_tasks
from sgl_amd_mono.backends.triton.tile_ops import dot_bf16, to_bf16


@triton.jit
def final_norm(hidden_ptr, residual_ptr, norm_w_ptr, normed_ptr, eps, pid, ok, task_count_ptr, S: tl.constexpr,
               T: tl.constexpr, D: tl.constexpr, NORM_GP: tl.constexpr, NPROG: tl.constexpr, SKIP_MASK: tl.constexpr,
               COUNT_TASKS: tl.constexpr):
    """Task r: normed[r] = bf16(x * rsqrt(mean(x^2) + eps) * w), x = hidden[r] + residual[r] in f32 (SGLang's
    RMSNorm.forward_native with a residual: the f32 sum normed, not its bf16 rounding). hidden, residual,
    normed: [R, D] bf16; w: [D] bf16."""
    GP: tl.constexpr = NORM_GP  # 128-groups of a hidden row, padded to a power of two
    offs = tl.arange(0, GP)[:, None] * 128 + tl.arange(0, 128)[None, :]
    m = offs < D
    w = tl.load(norm_w_ptr + offs, mask=m, other=0.0).to(tl.float32)
    for r in tl.range(pid, live_tasks(T, ok, S, SKIP_MASK), NPROG, num_stages=1):  # tasks: never pipelined
        count_task(task_count_ptr, S, COUNT_TASKS)
        x = (tl.load(hidden_ptr + r * D + offs, mask=m, other=0.0, cache_modifier=".cg").to(tl.float32)
             + tl.load(residual_ptr + r * D + offs, mask=m, other=0.0, cache_modifier=".cg").to(tl.float32))
        rstd = tl.math.rsqrt(tl.sum(tl.sum(x * x, axis=1), axis=0) / D + eps)
        tl.store(normed_ptr + r * D + offs, to_bf16((x * rstd) * w), mask=m)


@triton.jit
def lm_head(normed_ptr, lm_head_ptr, logits_ptr, pid, ok, task_count_ptr, S: tl.constexpr, T: tl.constexpr,
            R: tl.constexpr, D: tl.constexpr, V: tl.constexpr, BNV: tl.constexpr, STAGES: tl.constexpr,
            NPROG: tl.constexpr, SKIP_MASK: tl.constexpr, COUNT_TASKS: tl.constexpr, TP: tl.constexpr = 1,
            peers_ptr=None, rank=0, epoch=0, X: tl.constexpr = 0, XW: tl.constexpr = 0):
    """Task t: logits[:, t BNV .. + BNV] = f32(bf16(normed @ lm_head[rows]^T)), the whole hidden row a task (bf16
    products, f32 sums, one rounding to bf16). normed: [R, D] bf16 (R <= 16, one tile); lm_head: [V, D] bf16;
    logits: [R, V] f32. TP > 1: the tile pushed into this rank's slot of region X (XW words: [R, V]) of every rank
    instead (`gather` places it)."""
    rows = tl.arange(0, 16)
    cols = tl.arange(0, BNV)
    for t in tl.range(pid, live_tasks(T, ok, S, SKIP_MASK), NPROG, num_stages=1):  # tasks: never pipelined
        count_task(task_count_ptr, S, COUNT_TASKS)
        n = t * BNV + cols
        acc = tl.zeros((16, BNV), dtype=tl.float32)
        for k0 in tl.range(0, D, 128, num_stages=STAGES):
            ks = k0 + tl.arange(0, 128)
            x = tl.load(normed_ptr + rows[:, None] * D + ks[None, :], mask=(rows < R)[:, None], other=0.0,
                        cache_modifier=".cg")
            w = tl.load(lm_head_ptr + n[None, :].to(tl.int64) * D + ks[:, None], mask=(n < V)[None, :], other=0.0)
            acc += dot_bf16(x, w)
        m = (rows < R)[:, None] & (n < V)[None, :]
        if TP == 1:
            tl.store(logits_ptr + rows[:, None] * V + n[None, :], to_bf16(acc).to(tl.float32), mask=m)
        else:
            push_slot(peers_ptr, rank, X, XW, to_bf16(acc).to(tl.float32), rows[:, None] * V + n[None, :], m, epoch,
                      TP)
