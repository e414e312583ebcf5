"""The dense MLP half's stages in Triton (mlp_up, mlp_act, mlp_down; norm2 is the MoE half's): one @triton.jit
function a stage's task loop, called by the dense and tokens kernels (`glm53/kinds/halves.py` DENSE_STAGES is
the table). Conventions as `stages_attention.py`; no float atomics: bitwise reproducible."""

import triton
import triton.language as tl

from sgl_amd_mono.backends.triton.stages_attention import gemv_stage
from sgl_amd_mono.backends.triton.exchange import push_slot
from sgl_amd_mono.backends.triton.sync import count_task, last_to_land, live_tasks
from sgl_amd_mono.backends.triton.tile_ops import fp8_gemv_part, quant_group, sum_parts, to_bf16


@triton.jit
def mlp_up(xq2_ptr, xs2_ptr, gate_up_ptr, gate_up_s_ptr, mu_part_ptr, pid, ok, task_count_ptr, S: tl.constexpr,
           T: tl.constexpr, R: tl.constexpr, D: tl.constexpr, DI: tl.constexpr, BN_MU: tl.constexpr,
           KS_MU: tl.constexpr, STAGES: tl.constexpr, SWAP: tl.constexpr, NPROG: tl.constexpr,
           SKIP_MASK: tl.constexpr, COUNT_TASKS: tl.constexpr):
    """Task (column tile, k part): split-K parts of the block-FP8 gate_up on norm2's quantized rows."""
    gemv_stage(xq2_ptr, xs2_ptr, gate_up_ptr, gate_up_s_ptr, mu_part_ptr, live_tasks(T, ok, S, SKIP_MASK), pid,
               2 * DI, 0.0, 0.0, task_count_ptr, R, D, KS_MU, BN_MU, STAGES, NPROG, False, SWAP, S, COUNT_TASKS)


@triton.jit
def mlp_act(mu_part_ptr, mq_ptr, ms_ptr, pid, ok, task_count_ptr, S: tl.constexpr, T: tl.constexpr, R: tl.constexpr,
            DI: tl.constexpr, KS_MU: tl.constexpr, NPROG: tl.constexpr, SKIP_MASK: tl.constexpr,
            COUNT_TASKS: tl.constexpr):
    """Task g: columns g*128.. of SiLU(gate) * up, gate and up each the bf16 of their parts' sum (the linear's
    bf16 output), the product rounded to bf16 (SiluAndMul), quantized per 128 for down."""
    rows = tl.arange(0, 16)
    rmask = rows < R
    for g in tl.range(pid, live_tasks(T, ok, S, SKIP_MASK), NPROG, num_stages=1):  # tasks: never pipelined
        count_task(task_count_ptr, S, COUNT_TASKS)
        cols = g * 128 + tl.arange(0, 128)
        offs = rows[:, None] * (2 * DI) + cols[None, :]
        gate = to_bf16(sum_parts(mu_part_ptr, R * 2 * DI, offs, rmask[:, None], KS_MU)).to(tl.float32)
        up = to_bf16(sum_parts(mu_part_ptr + DI, R * 2 * DI, offs, rmask[:, None], KS_MU)).to(tl.float32)
        a = to_bf16(gate * tl.sigmoid(gate) * up).to(tl.float32)
        aq, as_ = quant_group(a)
        tl.store(mq_ptr + rows[:, None] * DI + cols[None, :], aq, mask=rmask[:, None])
        tl.store(ms_ptr + rows * (DI // 128) + g, as_, mask=rmask)


@triton.jit
def mlp_down(mq_ptr, ms_ptr, down_ptr, down_s_ptr, md_part_ptr, out_ptr, md_cnt_ptr, epoch, pid, ok, task_count_ptr,
             S: tl.constexpr, T: tl.constexpr, R: tl.constexpr, D: tl.constexpr, DI: tl.constexpr,
             BN_MD: tl.constexpr, KS_MD: tl.constexpr, STAGES: tl.constexpr, SWAP: tl.constexpr,
             NPROG: tl.constexpr, SKIP_MASK: tl.constexpr, COUNT_TASKS: tl.constexpr, TP: tl.constexpr = 1,
             peers_ptr=None, rank=0, X: tl.constexpr = 0, XW: tl.constexpr = 0):
    """Task (column tile, k part): a split-K part of the block-FP8 down; the last part of a column tile to land
    (md_cnt, an epoch-tagged arrival count a column tile) sums the tile's parts in part order: out = bf16(sum).
    TP > 1: that bf16(sum) (this rank's partial) is pushed into this rank's slot of region X (XW words: [R, D]) of
    every rank instead (mlp_down_sum sums the ranks')."""
    NKB: tl.constexpr = (DI // 128) // KS_MD
    rows = tl.arange(0, 16)
    rmask = rows < R
    for t in tl.range(pid, live_tasks(T, ok, S, SKIP_MASK), NPROG, num_stages=1):  # tasks: never pipelined
        count_task(task_count_ptr, S, COUNT_TASKS)
        nt = t // KS_MD
        acc = fp8_gemv_part(mq_ptr, ms_ptr, DI, DI // 128, down_ptr, DI, down_s_ptr, DI // 128, nt * BN_MD, D,
                            (t % KS_MD) * NKB, R, NKB, BN_MD, STAGES, SWAP)
        offs_n = nt * BN_MD + tl.arange(0, BN_MD)
        m_o = rmask[:, None] & (offs_n[None, :] < D)
        offs = rows[:, None] * D + offs_n[None, :]
        tl.store(md_part_ptr + (t % KS_MD) * (R * D) + offs, acc, mask=m_o)
        if last_to_land(md_cnt_ptr + nt, epoch, KS_MD):
            v = to_bf16(sum_parts(md_part_ptr, R * D, offs, m_o, KS_MD))
            if TP == 1:
                tl.store(out_ptr + offs, v, mask=m_o)
            else:
                push_slot(peers_ptr, rank, X, XW, v.to(tl.float32), offs, m_o, epoch, TP)
