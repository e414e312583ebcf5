"""Each name in SGLANG_READS still resolves on the installed SGLang (on the tiny model for module
attributes); one that does not fails here, naming it."""

from __future__ import annotations

import dataclasses
import importlib

import pytest

from sgl_amd_mono.glm53.sglang_reads import SGLANG_READS


def _resolve_owner(owner: str):
    module, _, cls = owner.rpartition(".")
    try:
        return importlib.import_module(owner)
    except ImportError:
        return getattr(importlib.import_module(module), cls)


def _has(obj, dotted: str) -> bool:
    for part in dotted.split("."):
        if not hasattr(obj, part):
            return False
        obj = getattr(obj, part)
    return True


def test_every_read_resolves(tiny_fp8):
    model, _ = tiny_fp8
    layer = model.model.layers[1]  # MoE + indexer
    objects = {"model": model, "layer": layer, "attn": layer.self_attn, "indexer": layer.self_attn.indexer, "mlp": layer.mlp}
    missing = []
    for kind, owner, name, _ in SGLANG_READS:
        if owner in objects:
            ok = _has(objects[owner], name)
        else:
            target = _resolve_owner(owner)
            if kind == "field" and dataclasses.is_dataclass(target):
                ok = name in {f.name for f in dataclasses.fields(target)}
            elif kind == "attr" and isinstance(target, type):
                # instance attributes set in __init__: look for the assignment in the class source
                import inspect

                src = inspect.getsource(target)
                ok = hasattr(target, name) or f"self.{name} =" in src or f"self.{name}:" in src
            else:
                ok = hasattr(target, name)
        if not ok:
            missing.append(f"{kind} {owner}.{name}")
    assert not missing, "SGLang no longer provides: " + "; ".join(missing)


def test_a_renamed_read_fails(tiny_fp8):
    """Negative control: the same check on a misspelt name reports it."""
    model, _ = tiny_fp8
    assert not _has(model.model.layers[1].self_attn, "w_kc_renamed")
    with pytest.raises(AttributeError):
        getattr(_resolve_owner("sglang.srt.layers.attention.dsa_backend.DSAMetadata"), "no_such_field")
