"""Host-side launch programs: placement, the static checks and their negative cases, guard words."""

import pytest
import torch

from sgl_amd_mono.backends.triton import kinds
from sgl_amd_mono.backends.triton.launch import SCRATCH_LIMIT
from sgl_amd_mono.backends.triton.tiles import Tiles
from sgl_amd_mono.common import guard, program
from sgl_amd_mono.common.launch import LaunchOptions
from sgl_amd_mono.glm53 import launch_inputs as li
from sgl_amd_mono.glm53.kinds import shared
from sgl_amd_mono.glm53.kinds.dims import layer_dims
from sgl_amd_mono.glm53.layer import layer_tensors


def _dims(tp=8, width=4, n_programs=132):
    geo = li.glm53_geometry()
    tiles = Tiles().resolve(geo, tp=tp, width=width, n_programs=n_programs)
    return layer_dims(geo, tp=tp, width=width, tiles=tiles, n_programs=n_programs, kv_dtype=torch.bfloat16)


def _prog(tp=8, width=4):
    return shared.TABLE.program(_dims(tp, width), rows=width)


@pytest.mark.parametrize("n_programs", [1, 7, 132])
def test_shared_program_passes_static_checks(n_programs):
    prog = shared.TABLE.check(_dims(n_programs=n_programs), rows=4, n_programs=n_programs, scratch_limit=SCRATCH_LIMIT)
    program.check_all(prog, program.place_round_robin(prog, n_programs), SCRATCH_LIMIT)


def test_cyclic_placement_refused():
    prog = _prog()
    place = program.place_sequential(prog)
    # a task of stage 1 placed before the stage-0 tasks it waits on, on the same program
    place[0].insert(0, place[0].pop(prog.stages[0].n_tasks))
    with pytest.raises(ValueError, match="cycle"):
        program.check_acyclic(prog, place)


def test_cross_program_cycle_refused():
    prog = _prog(width=2)
    place = program.place_round_robin(prog, 2)
    # program 0 runs a stage-2 task before its stage-1 tasks while program 1 holds stage-1 work
    t = next(i for i, x in enumerate(place[0]) if x.stage == 2)
    place[0].insert(0, place[0].pop(t))
    with pytest.raises(ValueError, match="cycle"):
        program.check_acyclic(prog, place)


def test_double_cache_write_refused():
    prog = _prog()
    bad = [program.Stage(s.name, s.n_tasks, s.reads, s.writes,
                         cache_rows=(lambda t: (0,)) if s.cache_rows else None) for s in prog.stages]
    prog.stages = bad
    with pytest.raises(ValueError, match="exactly once"):
        program.check_cache_writes(prog)


def test_read_before_write_refused():
    prog = _prog()
    prog.stages = [prog.stages[1]] + prog.stages[2:]
    with pytest.raises(ValueError, match="before any stage writes"):
        program.check_dataflow(prog)


def test_scratch_and_residency_refused():
    prog = _prog()
    with pytest.raises(ValueError, match="scratch needs"):
        program.check_scratch(prog, 1024)
    res = program.resident_programs(n_sm=132, regs_per_thread=184, num_warps=8, smem_bytes=57728)
    assert res == 132
    program.check_resident("x", 132, res)
    with pytest.raises(ValueError, match="exceeds"):
        program.check_resident("x", 264, res)


def test_amd_residency():
    """CDNA occupancy from an AOT compile's figures: the gfx950 GLM-5.3 TP8 build (457 VGPRs, 4 waves,
    144384 B of LDS) fits one program a CU, so a 256-program grid on 256 CUs is resident; one VGPR over
    a SIMD's 512, or LDS over the CU's 160 KiB, leaves none."""
    kw = dict(n_cu=256, waves_per_program=4, lds_per_cu=program.AMD_LDS_PER_CU["gfx950"])
    assert program.resident_programs_amd(vgprs=457, lds_bytes=144384, **kw) == 256
    assert program.resident_programs_amd(vgprs=513, lds_bytes=144384, **kw) == 0
    assert program.resident_programs_amd(vgprs=457, lds_bytes=170 * 1024, **kw) == 0
    assert program.resident_programs_amd(vgprs=128, lds_bytes=0, **kw) == 256 * 4  # 4 waves a SIMD
    assert program.resident_programs_amd(vgprs=128, lds_bytes=60 * 1024, **kw) == 256 * 2  # LDS-bound
    with pytest.raises(ValueError, match="exceeds"):
        program.check_resident("x", 512, program.resident_programs_amd(vgprs=457, lds_bytes=144384, **kw))


def test_bad_builds_refused():
    """Each refusal names its value; several at once are all listed."""
    geo = li.glm53_geometry()
    opts = LaunchOptions(placement="sequential")
    for kw, text in [(dict(tp=8, width=17), "width 17 is not between 1 and 16 rows"),
                     (dict(tp=3, width=1), "tp 3: num_attention_heads 64 is not divisible by tp 3"),
                     (dict(tp=8, width=1, kv_dtype=torch.float16), "kv cache dtype torch.float16 is not one of")]:
        kw.setdefault("kv_dtype", torch.bfloat16)
        with pytest.raises(ValueError, match=text):
            kinds.plan("shared", geo, device="cpu", options=opts, tiles=Tiles(), **kw)
    with pytest.raises(ValueError, match="width 0 is not between.*; kv cache dtype torch.float16"):
        kinds.plan("shared", geo, tp=8, width=0, kv_dtype=torch.float16, device="cpu", options=opts, tiles=Tiles())


def test_weights_of_another_shard_refused_at_bind():
    """TP1 weights bound to a TP8 plan: every weight that differs is named with both shapes."""
    geo = li.glm53_geometry()
    plan = kinds.plan("shared", geo, tp=8, width=1, kv_dtype=torch.bfloat16, device="meta",
                      options=LaunchOptions(n_programs=132), tiles=Tiles())
    with pytest.raises(ValueError) as e:
        plan.bind(layer_tensors(*li.meta_weights(geo, tp=1)))
    msg = str(e.value)
    for name, got, want in [("q_b", (16384, 2048), [2048, 2048]), ("w13", (257, 4096, 6144), [257, 512, 6144]),
                            ("o_proj", (6144, 16384), [6144, 2048])]:
        assert f"weight {name} is {got} " in msg and f"built for {want}" in msg, msg
    assert "qkv_a " not in msg  # replicated: the same at every TP


def test_error_word_decodes():
    err = guard.new_error_word("cpu")
    assert guard.read_error(err) is None
    err[:] = torch.tensor([guard.ERR_FLAG, 3, 5, 92, 5, 0, 132, 1, 0])  # host_copy 0: a check build
    with pytest.raises(RuntimeError, match="program 92 in stage attn missed its deadline"):
        guard.check_error(err, {3: "shared"}, shared.TABLE.stage_names())
    with pytest.raises(ValueError):
        guard.Deadline.from_seconds(0)
