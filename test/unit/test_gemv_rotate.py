"""The block-FP8 GEMV with its k blocks rotated a task (`tile_ops.fp8_gemv_part` ROT, tiles.qb_rotate) under Triton's
interpreter (`_gemv_rotate_main.py`, a subprocess): in order and rotated, each task's sum within 1e-6 of torch's f64
product over 5 k blocks of scales 1 to 10^4, so every block summed once; the reference without one block (the planted
control) fails that bound."""

import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def test_rotated_gemv_sums_every_block_once():
    env = dict(os.environ, TRITON_INTERPRET="1")
    r = subprocess.run([sys.executable, os.path.join(HERE, "_gemv_rotate_main.py")], env=env, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(r.stdout.strip().splitlines()[-1])
    assert res["rel_rot0"] <= 1e-6 and res["rel_rot1"] <= 1e-6, res
    assert res["rel_control"] > 1e-6, res
