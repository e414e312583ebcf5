"""`sgl-amd-mono explain`: served, refused with every reason, and bad input, through SGLang's own check."""

from __future__ import annotations

import pytest

from sgl_amd_mono import cli
from sgl_amd_mono.glm53 import backends_available


def run(capsys, *argv):
    code = cli.main(["explain", "--exit-code", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_served_when_a_launch_backend_exists(capsys, monkeypatch):
    monkeypatch.setattr(backends_available, "LAUNCH_BACKENDS", {"gfx950": "test"})
    code, out, _ = run(capsys, "--model", "glm-5.3", "--tp", "8", "--isa", "gfx950")
    assert code == 0, out
    assert "decode batch 8 x 1 = 8 rows" in out and out.strip().endswith("served")


def test_mtp_verify_keys_at_tp4(capsys, monkeypatch):
    monkeypatch.setattr(backends_available, "LAUNCH_BACKENDS", {"gfx950": "test"})
    code, out, _ = run(capsys, "--tp", "4", "--speculative-algorithm", "EAGLE", "--speculative-num-steps", "3",
                       "--speculative-eagle-topk", "1")
    assert code == 0, out
    assert "target_verify batch 1 x 4 = 4 rows" in out and "8 rows" not in out


def test_today_build_refuses_the_good_setup(capsys):
    code, out, _ = run(capsys, "--isa", "sm_90", "--tp", "2")
    assert code == 1
    assert "startup checks pass" in out and "no launch backend runs a whole GLM-5.3 step on sm_90" in out


def test_refused_with_every_reason(capsys):
    code, out, _ = run(capsys, "--tp", "3", "--kv-cache-dtype", "fp8_e5m2", "--page-size", "1",
                       "--config", "index_topk=1024", "--config", "rope_interleave=false", "--set", "enable_dp_lm_head=true")
    assert code == 1
    for name in ("tp_size 3", "kv_cache_dtype 'fp8_e5m2'", "page_size 1", "config.index_topk 1024 is not 2048",
                 "config.rope_interleave", "enable_dp_lm_head"):
        assert name in out, out


def test_refused_answer_exits_0_without_exit_code(capsys):
    code = cli.main(["explain", "--tp", "3"])
    out = capsys.readouterr().out
    assert code == 0 and "refused at startup" in out and "tp_size 3" in out


def test_unknown_isa_is_refused(capsys):
    code, out, _ = run(capsys, "--isa", "gfx90a")
    assert code == 1 and "gfx90a" in out


@pytest.mark.parametrize("argv,names", [
    (["--model", "/no/such/config.json"], "/no/such/config.json"),
    (["--set", "no_such_field=1"], "no_such_field"),
    (["--config", "index_topk"], "index_topk"),
    (["--tp", "0"], "--tp 0"),
])
def test_bad_input_exits_2_naming_it(capsys, argv, names):
    code, _, err = run(capsys, *argv)
    assert code == 2 and names in err


def test_bad_flag_exits_2(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["explain", "--tp", "eight"])
    assert e.value.code == 2
