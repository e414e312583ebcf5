"""The reference backend through SGLang's real binding on CPU: `_install_forward` routes served
DECODE / TARGET_VERIFY keys to `runner.build(..., backend="reference")` (via the spec's build) and
everything else to the original forward; the routed step writes exactly the rows at
out_cache_loc, with KV rows and index keys as SGLang's modules compute them.

SGLang's DSA backend is GPU-only, so `dsa_fixture` hands the step the same fields (a real
DSATokenToKVPool and DSAMetadata, a real ForwardBatch).
"""

from __future__ import annotations

import functools

import pytest
import torch

from dsa_fixture import DsaCaches, make_step
from sgl_amd_mono.backends import reference as ref
from sgl_amd_mono.glm53.config import INDEX_PAGE, Glm53Geometry
from sgl_amd_mono.glm53.indexer import hadamard, read_index_k
from sgl_amd_mono.glm53.reference_bounds import BOUNDS, within

DECODE = ("decode", 3, 1)  # two requests and one pad row
VERIFY = ("target_verify", 2, 2)


@pytest.fixture(scope="module")
def routed(tiny_fp8):
    from sglang.kernels.plugin_kernels.amd.spec import BuildContext, ShapeKey
    from sglang.srt.kernel_plugins.amd.binding import _install_forward

    from sgl_amd_mono.glm53.spec import make_spec

    model, cfg = tiny_fp8
    original = model.forward
    calls = []

    @functools.wraps(original)
    def sentinel(*args, **kwargs):  # stands for SGLang's forward, which needs a GPU DSA backend
        calls.append(args[2] if len(args) > 2 else kwargs["forward_batch"])
        return "original forward"

    model.forward = sentinel
    spec = make_spec(backend="reference", is_expert_fusion_required=False)
    built = spec.build(model, cfg, BuildContext(isa="cpu", widths=(3, 4), deadline_s=10.0, copies={}))
    served = frozenset(ShapeKey(forward_mode=m, batch_size=b, tokens_per_request=n) for m, b, n in (DECODE, VERIFY))
    _install_forward(model=model, built=built, served=served, spec=spec)
    yield model, Glm53Geometry.from_hf(cfg), built, calls
    model.forward = original


def _run(model, built, caches, batch, backend, positions):
    from sglang.kernels.plugin_kernels.amd.spec import Plan, ShapeKey
    from sglang.srt.model_executor.forward_context import ForwardContext, forward_context

    before = caches.snapshot()
    with forward_context(ForwardContext(attn_backend=backend)):
        out = model.forward(batch.input_ids, positions, batch)
        after = caches.snapshot()
        key = ShapeKey(forward_mode=batch.forward_mode.name.lower(), batch_size=batch.batch_size,
                       tokens_per_request=batch.input_ids.shape[0] // batch.batch_size)
        again, trace = built.step(plan=Plan(key=key), input_ids=batch.input_ids, positions=positions,
                                  forward_batch=batch, is_traced=True)
    assert torch.equal(again.next_token_logits, out.next_token_logits)  # reproducible, and rewrites are idempotent
    return out, trace, before, after


def _changed_slots(before: torch.Tensor, after: torch.Tensor) -> set:
    return set((before.view(before.shape[0], -1) != after.view(after.shape[0], -1)).any(dim=1).nonzero()[:, 0].tolist())


def _changed_index_slots(before: torch.Tensor, after: torch.Tensor) -> set:
    out = set()
    for slot in range(before.shape[0] * INDEX_PAGE):
        p, o = divmod(slot, INDEX_PAGE)
        kb = slice(o * 128, (o + 1) * 128)
        sb = slice(INDEX_PAGE * 128 + 4 * o, INDEX_PAGE * 128 + 4 * o + 4)
        if not (torch.equal(before[p, kb], after[p, kb]) and torch.equal(before[p, sb], after[p, sb])):
            out.add(slot)
    return out


def _sglang_kv_row(model, geo, layer_id, x_normed, positions):
    """[kv_a_layernorm(k_nope) | rope(k_pe)] from SGLang's own modules (qkv_a: the pinned reference linear)."""
    a = model.model.layers[layer_id].self_attn
    w = a.fused_qkv_a_proj_with_mqa
    qkv = ref.linear(x_normed, w.weight, getattr(w, "weight_scale_inv", None))
    _, k_nope, k_pe = qkv.split([geo.q_lora, geo.kv_lora, geo.qk_rope], dim=-1)
    q_dummy = torch.zeros(k_pe.shape[0], 1, geo.qk_rope, dtype=torch.bfloat16)
    _, k_pe = a.rotary_emb(positions, q_dummy, k_pe.contiguous().view(-1, 1, geo.qk_rope))
    return torch.cat((a.kv_a_layernorm(k_nope.contiguous()), k_pe.view(-1, geo.qk_rope)), dim=-1)


def _sglang_index_key(model, geo, layer_id, x_normed, positions):
    """The index key as SGLang's indexer modules compute it (wk: the pinned reference linear), dequantized."""
    ix = model.model.layers[layer_id].self_attn.indexer
    k = ref.linear(x_normed, ix.wk.weight, getattr(ix.wk, "weight_scale_inv", None))
    k = ix.k_norm(k)
    q_dummy = torch.zeros(k.shape[0], 1, geo.qk_rope, dtype=torch.bfloat16)
    _, k_rope = ix.rotary_emb(positions, q_dummy, k[:, : geo.qk_rope].contiguous().view(-1, 1, geo.qk_rope))
    k = torch.cat((k_rope.view(-1, geo.qk_rope), k[:, geo.qk_rope :]), dim=-1)
    return hadamard(k) if not (ix.use_dsa_indexer_fusion or ix.use_aiter_fused_fp8_writer) else k


def _check_step(model, geo, caches, batch, trace, before, after):
    loc = batch.out_cache_loc
    rows = loc.shape[0]
    written = set(loc.tolist())
    last_row_of = {int(s): r for r, s in enumerate(loc.tolist())}  # slot 0 keeps the last pad row
    for i in range(geo.n_layers):
        assert _changed_slots(before["kv"][i], after["kv"][i]) <= written
        kv = caches.pool.get_key_buffer(i).view(-1, geo.kv_cache_dim)
        want = _sglang_kv_row(model, geo, i, trace["x_normed"][i], batch.positions).to(kv.dtype).float()
        got = kv[loc].float()
        keep = torch.tensor([last_row_of[int(s)] == r for r, s in enumerate(loc.tolist())])
        ok, value = within("reference.kv_row.max_rel", got[keep], want[keep])
        assert ok, f"layer {i}: KV rows {value:.3g} from SGLang's modules"
        print(f"layer {i} reference.kv_row.max_rel {value:.3g}")
        assert not within("reference.kv_row.max_rel", got[keep] * 1.2, want[keep])[0]  # planted error fails
        if geo.runs_indexer[i]:
            buf_b, buf_a = before["index"][i], after["index"][i]
            assert _changed_index_slots(buf_b, buf_a) <= written
            table = (loc // INDEX_PAGE).view(-1, 1).int()
            k, s = read_index_k(caches.pool.get_index_k_with_scale_buffer(i), page_table=table, dim=geo.index_dim)
            got_k = k[torch.arange(rows), loc % INDEX_PAGE].float() * s[torch.arange(rows), loc % INDEX_PAGE, None]
            want_k = _sglang_index_key(model, geo, i, trace["x_normed"][i], batch.positions)
            assert torch.all(torch.log2(s[torch.arange(rows), loc % INDEX_PAGE]).frac() == 0)  # ue8m0 scales
            ok, value = within("reference.index_k.max_rel", got_k[keep], want_k[keep].float())
            assert ok, f"layer {i}: index keys {value:.3g} from SGLang's modules"
            print(f"layer {i} reference.index_k.max_rel {value:.3g}")
            assert not within("reference.index_k.max_rel", got_k[keep] * 1.2, want_k[keep].float())[0]
        else:
            assert caches.pool.get_index_k_with_scale_buffer(i).shape[0] == 0
            assert torch.equal(trace["topk"][i], trace["topk"][i - 1])  # shared: the carried slots as-is


def _expect_trivial_topk(caches, geo, trace, *, row, req, length):
    want = torch.full((geo.index_topk,), -1, dtype=torch.int32)
    want[:length] = caches.req_to_token.req_to_token[req, :length]
    for i in geo.indexer_layers:
        assert torch.equal(trace["topk"][i][row], want), f"layer {i} row {row}"


def test_decode_routes_to_reference(routed):
    model, geo, built, calls = routed
    caches = DsaCaches(geo, kv_dtype=torch.float8_e4m3fn, bs=2, max_ctx=128, seed=1)
    batch, backend, pos = make_step(caches, seq_lens=[9, 70], tokens=1, input_ids=torch.tensor([5, 200, 0]), pad_rows=1)
    n_calls = len(calls)
    out, trace, before, after = _run(model, built, caches, batch, backend, pos)
    assert len(calls) == n_calls, "a served key ran the original forward"
    assert out.next_token_logits.dtype == torch.float32 and out.next_token_logits.shape == (3, geo.vocab)
    assert torch.equal(out.next_token_logits, torch.nn.functional.linear(trace["hidden"], model.lm_head.weight).float())
    _check_step(model, geo, caches, batch, trace, before, after)
    _expect_trivial_topk(caches, geo, trace, row=0, req=0, length=9)  # context <= index_topk: all, in order
    for i in geo.indexer_layers:  # context 70 > 16: 16 distinct slots of the request's first 70 positions
        sel = trace["topk"][i][1]
        assert (sel >= 0).all() and len(set(sel.tolist())) == geo.index_topk
        assert set(sel.tolist()) <= set(caches.req_to_token.req_to_token[1, :70].tolist())
    assert int(batch.out_cache_loc[2]) == 0 and 0 in _changed_slots(before["kv"][0], after["kv"][0])


def test_verify_routes_and_captures_hidden(routed):
    model, geo, built, calls = routed
    caches = DsaCaches(geo, kv_dtype=torch.bfloat16, bs=2, max_ctx=128, seed=2)
    batch, backend, pos = make_step(caches, seq_lens=[5, 40], tokens=2, input_ids=torch.tensor([1, 2, 3, 4]),
                                    capture_hidden=True)
    out, trace, before, after = _run(model, built, caches, batch, backend, pos)
    assert torch.equal(out.hidden_states, trace["hidden"])  # CaptureHiddenMode.FULL: post-norm rows
    _check_step(model, geo, caches, batch, trace, before, after)
    # Row j of request b attends positions < seq_lens[b] + j + 1: its own draft token, not later ones.
    _expect_trivial_topk(caches, geo, trace, row=0, req=0, length=6)
    _expect_trivial_topk(caches, geo, trace, row=1, req=0, length=7)
    later = int(caches.req_to_token.req_to_token[1, 41])
    for i in geo.indexer_layers:
        assert later not in trace["topk"][i][2].tolist()


def test_unserved_key_runs_original_forward(routed):
    model, geo, built, calls = routed
    caches = DsaCaches(geo, kv_dtype=torch.bfloat16, bs=2, max_ctx=64, seed=3)
    batch, backend, pos = make_step(caches, seq_lens=[3, 4], tokens=1, input_ids=torch.tensor([1, 2]))
    before = caches.snapshot()
    assert model.forward(batch.input_ids, pos, batch) == "original forward"  # decode 2×1 is not served
    assert calls[-1] is batch
    assert all(torch.equal(a, b) for a, b in zip(before["kv"], caches.snapshot()["kv"]))


def test_unknown_backend_is_refused(tiny_fp8):
    from sglang.kernels.plugin_kernels.amd.spec import BuildContext

    from sgl_amd_mono.glm53 import runner

    model, cfg = tiny_fp8
    with pytest.raises(ValueError, match=r"backend 'launch' is not one of \['reference', 'triton'\]"):
        runner.build(model, cfg, BuildContext(isa="gfx950", widths=(1,), deadline_s=10.0, copies={}), backend="launch")
