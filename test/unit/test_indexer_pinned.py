"""The reference indexer against SGLang's torch references (act_quant: test_reference_triton.py): the paged index
scores (`fp8_paged_mqa_logits_torch`, on the same page-layout buffer), and the top-k
(`_topk_unfused`), with ties at the index_topk-th key and contexts <= index_topk.
"""

from __future__ import annotations

import torch

from sgl_amd_mono.backends import reference as ref
from sgl_amd_mono.glm53.config import INDEX_PAGE
from sgl_amd_mono.glm53.indexer import IndexQK, index_scores, select_topk, to_slots, write_index_k
from sgl_amd_mono.glm53.reference_bounds import BOUNDS, within

H, D, TOPK = 4, 128, 16


def _cache(pages: int, seed: int):
    gen = torch.Generator().manual_seed(seed)
    buf = torch.zeros(pages, INDEX_PAGE * (D + 4), dtype=torch.uint8)
    k = torch.randn(pages * INDEX_PAGE, D, generator=gen) * torch.rand(pages * INDEX_PAGE, 1, generator=gen) * 4
    kq, ks = ref.act_quant_ue8m0(k)
    write_index_k(buf, loc=torch.arange(pages * INDEX_PAGE), k_fp8=kq, k_scale=ks[:, 0])
    return buf, gen


def test_scores_match_fp8_paged_mqa_logits_torch():
    from sglang.srt.layers.attention.dsv4.indexer import fp8_paged_mqa_logits_torch

    buf, gen = _cache(6, seed=1)
    rows = 3
    page_table = torch.stack([torch.randperm(6, generator=gen)[:4] for _ in range(rows)]).int()
    lengths = torch.tensor([10, 200, 256], dtype=torch.int32)
    q = torch.randn(rows * H, D, generator=gen)
    q_fp8, q_s = ref.act_quant_ue8m0(q)
    head_w = torch.randn(rows, H, generator=gen) * q_s.view(rows, H)
    qk = IndexQK(q_fp8=q_fp8.view(rows, H, D), head_w=head_w, k_fp8=q_fp8[:rows], k_scale=q_s[:rows, 0])
    ours = index_scores(qk, buf, page_table=page_table, lengths=lengths)
    theirs = fp8_paged_mqa_logits_torch(q_fp8.view(rows, 1, H, D), buf.view(-1, INDEX_PAGE, 1, D + 4), head_w,
                                        lengths, page_table, None, 4 * INDEX_PAGE, clean_logits=False)
    valid = torch.arange(4 * INDEX_PAGE)[None, :] < lengths[:, None]
    ok, value = within("reference.index_scores.max_rel", ours[valid], theirs[valid])
    assert ok, value
    print(f"reference.index_scores.max_rel {value:.3g}")
    bad = index_scores(IndexQK(qk.q_fp8, head_w * 1.2, qk.k_fp8, qk.k_scale), buf, page_table=page_table, lengths=lengths)
    assert not within("reference.index_scores.max_rel", bad[valid], theirs[valid])[0]
    assert torch.all(ours[~valid] == float("-inf"))


def test_topk_matches_topk_unfused_and_breaks_ties_low():
    from sglang.srt.layers.attention.dsa.dsa_topk_backend import _topk_unfused

    gen = torch.Generator().manual_seed(2)
    scores = torch.randn(4, 64, generator=gen)
    lengths = torch.tensor([5, 16, 40, 64], dtype=torch.int32)
    # Row 3: position p scores 64 - p, and positions 50, 20, 60, 33 tie with the 16th (position 15, 49).
    row = torch.arange(64, 0, -1).float()
    row[[50, 20, 60, 33]] = 49.0
    scores[3] = row
    ours = select_topk(scores, lengths=lengths, topk=TOPK)
    theirs = _topk_unfused(scores, lengths, TOPK)
    assert torch.equal(ours[0, :5], torch.arange(5, dtype=torch.int32)) and torch.all(ours[0, 5:] == -1)
    assert torch.equal(ours[1], torch.arange(16, dtype=torch.int32))  # length == topk: all, in order
    for r in (0, 1, 2):  # same keys as SGLang's top-k (its order differs)
        assert set(ours[r].tolist()) == set(theirs[r].tolist())
    # Ties: both keep the 15 strictly-better keys and one tied key; ours takes the lowest position.
    strictly = set(range(15))
    tied = {15, 20, 33, 50, 60}
    assert strictly <= set(theirs[3].tolist()) and len(set(theirs[3].tolist()) & tied) == 1
    assert set(ours[3].tolist()) == strictly | {15} and torch.equal(ours[3], torch.sort(ours[3]).values)
    # Negative control: the best unselected key swapped in must differ from SGLang's keys.
    planted = ours[2].clone()
    masked = scores[2, :40].clone()
    masked[planted.long()] = float("-inf")
    planted[0] = int(masked.argmax())
    assert set(planted.tolist()) != set(theirs[2].tolist())


def test_slots_through_page_table():
    table = torch.tensor([[7, 2, 9]], dtype=torch.int32)
    pos = torch.tensor([[0, 63, 64, 130, -1]], dtype=torch.int32)
    want = torch.tensor([[7 * 64, 7 * 64 + 63, 2 * 64, 9 * 64 + 2, -1]], dtype=torch.int32)
    assert torch.equal(to_slots(pos, page_table=table), want)
