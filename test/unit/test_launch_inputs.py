"""The decode step the timings' targets use for the shared kind (`launch_inputs.decode_step`): a row a request, each
request in its own pages, every top-k entry a distinct valid slot of its own request, in position order."""

import pytest
import torch

from sgl_amd_mono.glm53 import launch_inputs as li

PAGE = 64


def _pages(slots: torch.Tensor) -> set:
    return set((slots.long() // PAGE).tolist())


def test_decode_step_rows_read_their_own_requests():
    geo = li.tiny_geometry()
    contexts = [300, 236, 172]
    st = li.decode_step(geo, contexts=contexts, kv_dtype=torch.bfloat16, seed=3)
    k = geo.index_topk
    assert st.topk_slots.shape == (3, k) and st.live == 3
    assert st.kv_cache.shape[0] == (1 + sum(-(-c // PAGE) for c in contexts)) * PAGE
    seen = set()
    for b, n in enumerate(contexts):
        row = st.topk_slots[b].long()
        assert (row >= PAGE).all() and len(set(row.tolist())) == k  # valid, distinct, none in the dummy page 0
        own = _pages(row) | _pages(st.out_loc[b:b + 1])
        assert len(own) <= -(-n // PAGE) and not own & seen  # at most its request's pages, shared with no other row
        seen |= own
    # position order: within a page the offsets rise; the pages come in the request's table order, so a slot's
    # offset in its page restarts only where its page changes
    for b in range(3):
        row = st.topk_slots[b].long()
        same = row[1:] // PAGE == row[:-1] // PAGE
        assert (row[1:][same] > row[:-1][same]).all()
    assert (st.out_loc % PAGE).tolist() == [(n - 1) % PAGE for n in contexts]  # each row's new key: its last position


def test_decode_step_refuses_a_context_within_the_top_k():
    geo = li.tiny_geometry()
    with pytest.raises(ValueError, match="index_topk"):
        li.decode_step(geo, contexts=[300, geo.index_topk], kv_dtype=torch.bfloat16)
