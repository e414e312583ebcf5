"""Pad rows all write slot 0: the oracles and the launches keep the last row's (`reference.last_writers`),
where an index_put with repeated indices keeps an unspecified one (on the H200 the indexer kind's two pad rows
raced on slot 0: results/indexer1_h200_check_layer_pad_race.log)."""

import torch

from sgl_amd_mono.backends import reference as ref
from sgl_amd_mono.glm53.indexer import write_index_k


def test_the_last_row_of_a_slot_writes_it():
    loc = torch.tensor([235, 236, 0, 0, 7, 0])
    assert ref.last_writers(loc).tolist() == [True, True, False, False, True, True]
    assert ref.last_writers(torch.tensor([3, 4, 5])).all()  # no repeats: every row writes


def test_write_index_k_keeps_the_last_row():
    buf = torch.zeros(2, 64 * 132, dtype=torch.uint8)
    k = torch.stack([torch.full((128,), float(v)) for v in (1, 2, 3)]).to(torch.float8_e4m3fn)
    write_index_k(buf, loc=torch.tensor([0, 0, 65]), k_fp8=k, k_scale=torch.tensor([1.0, 2.0, 4.0]))
    assert buf[0, :128].view(torch.float8_e4m3fn).float().unique().tolist() == [2.0]  # row 1, not row 0
    assert buf[0, 64 * 128: 64 * 128 + 4].view(torch.float32).item() == 2.0
    assert buf[1, 128:256].view(torch.float8_e4m3fn).float().unique().tolist() == [3.0]
