"""`sgl-amd-mono explain`: served, refused with every reason, and bad input, through SGLang's own check."""

from __future__ import annotations

import pytest

from sgl_amd_mono import cli
from sgl_amd_mono.glm53 import served


def run(capsys, *argv):
    code = cli.main(["explain", "--exit-code", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_sm90_tp1_is_served_with_its_widths(capsys, monkeypatch):
    monkeypatch.delenv(served.UNVERIFIED_ENV, raising=False)
    code, out, _ = run(capsys, "--model", "glm-5.3", "--tp", "1", "--isa", "sm_90")
    assert code == 0, out
    assert "decode batch 1 x 1 = 1 rows, decode batch 2 x 1 = 2 rows, decode batch 4 x 1 = 4 rows" in out
    assert f"verified by {served.RAN[('sm_90', 1)]}" in out and "GlmMoeDsaForCausalLMNextN" in out
    assert out.strip().endswith("served")


def test_gfx950_is_refused_unless_unverified_is_set(capsys, monkeypatch):
    monkeypatch.delenv(served.UNVERIFIED_ENV, raising=False)
    code, out, _ = run(capsys, "--tp", "1", "--isa", "gfx950")
    assert code == 1 and "no whole step of them has run on gfx950" in out and "SGLANG_AMD_MONO_UNVERIFIED=1" in out
    monkeypatch.setenv(served.UNVERIFIED_ENV, "1")
    code, out, _ = run(capsys, "--tp", "1", "--isa", "gfx950")
    assert code == 0, out
    assert "UNVERIFIED (SGLANG_AMD_MONO_UNVERIFIED=1): triton launches at TP 1 on gfx950" in out
    assert out.strip().endswith("served")


def test_tp8_on_sm90_is_refused_naming_why_and_served_unverified(capsys, monkeypatch):
    monkeypatch.delenv(served.UNVERIFIED_ENV, raising=False)
    code, out, _ = run(capsys, "--model", "glm-5.3", "--tp", "8", "--isa", "sm_90")
    assert code == 1 and "triton launches at TP 8 on sm_90: no whole step of them has run on several GPUs" in out, out
    assert "SGLANG_AMD_MONO_UNVERIFIED=1" in out and out.count("\n  - ") == 1, out
    monkeypatch.setenv(served.UNVERIFIED_ENV, "1")
    code, out, _ = run(capsys, "--model", "glm-5.3", "--tp", "8", "--isa", "sm_90")
    assert code == 0, out
    assert "decode batch 8 x 1 = 8 rows" in out and "(unverified: the startup log warns)" in out
    assert ("UNVERIFIED (SGLANG_AMD_MONO_UNVERIFIED=1): triton launches at TP 8 on sm_90: no whole step of them has "
            "run on several GPUs") in out and out.strip().endswith("served")


def test_tp_not_built_is_refused_even_unverified(capsys, monkeypatch):
    monkeypatch.setenv(served.UNVERIFIED_ENV, "1")
    code, out, _ = run(capsys, "--tp", "3", "--isa", "sm_90")
    assert code == 1 and "tp 3: the launches build TP [1, 2, 4, 8] only" in out, out


def test_mtp_verify_keys_at_tp1(capsys, monkeypatch):
    monkeypatch.delenv(served.UNVERIFIED_ENV, raising=False)
    code, out, _ = run(capsys, "--tp", "1", "--isa", "sm_90", "--speculative-algorithm", "EAGLE",
                       "--speculative-num-steps", "3", "--speculative-eagle-topk", "1")
    assert code == 0, out
    assert "target_verify batch 1 x 4 = 4 rows" in out and "8 rows" not in out


def test_fp8_kv_on_sm90_names_the_row_layout(capsys):
    code, out, _ = run(capsys, "--tp", "1", "--isa", "sm_90", "--kv-cache-dtype", "fp8_e4m3")
    assert code == 1 and "flashmla_kv" in out and "576 values" in out and "656-byte rows" in out, out
    code, out, _ = run(capsys, "--tp", "1", "--isa", "sm_90", "--kv-cache-dtype", "fp8_e4m3",
                       "--dsa-decode-backend", "triton")
    assert code == 0, out


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


def test_no_foreign_platform_warnings():
    """SGLang warns at import that AWQ and GGUF need other platforms; explain's answer does not pass that on."""
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "sgl_amd_mono.cli", "explain", "--tp", "1", "--isa", "sm_90"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip().endswith("served"), r.stdout + r.stderr
    assert "AWQ" not in r.stderr and "GGUF" not in r.stderr, r.stderr
