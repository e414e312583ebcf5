"""`sgl-amd-mono explain`: before any weight loads, would --enable-amd-monokernel serve this GLM-5.3 setup?
`sgl-amd-mono check-report FILE`: the summary and plot of an SGLANG_AMD_MONO_CHECK=1 report (`glm53/audit_report.py`).

It asks SGLang's own startup check (`monokernel_disable_reasons`, through `find_spec` and the registered
spec) with a real ServerArgs and ModelConfig built from the given model config, then says which step keys
and widths the launches would take, and whether the launches serve this ISA and TP size by default
(`glm53/served.py`: only where they have run; SGLANG_AMD_MONO_UNVERIFIED=1 otherwise).
Exit status: 0 once answered (with --exit-code: 0 served, 1 refused), 2 bad command-line input; check-report: 0
once summarized (with --exit-code: 1 where a value is outside its bound), 2 an unreadable report.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import warnings
from typing import Any, Optional, Sequence

# Defaults are what SGLang resolves for GLM-5.3 on the given ISA, so a bare command reads as
# `sglang serve --model-path zai-org/GLM-5.3 --tp 8 --enable-amd-monokernel` would.
DEFAULT_ISA = "gfx950"


class BadInput(ValueError):
    """A command-line value explain cannot turn into a server configuration."""


def _default_decode_backend(*, isa: str, kv_cache_dtype: str) -> Optional[str]:
    """SGLang's DSA decode-backend default (overrides.py _dsa_split_backend_resolution)."""
    if isa.startswith("gfx"):
        return "triton"
    if isa == "sm_90":
        return "flashmla_kv" if kv_cache_dtype == "fp8_e4m3" else "fa3"
    return None


def _resolved_kv_cache_dtype(*, isa: str, kv_cache_dtype: str) -> str:
    """SGLang's DSA KV dtype resolution below sm_100 (every ISA the spec lists): auto and bf16 -> bfloat16."""
    if kv_cache_dtype == "bf16" or (kv_cache_dtype == "auto" and (isa.startswith("gfx") or isa == "sm_90")):
        return "bfloat16"
    return kv_cache_dtype


def _parse_sets(pairs: Sequence[str], *, flag: str) -> dict[str, Any]:
    out = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise BadInput(f"{flag} {pair!r} is not KEY=VALUE")
        try:
            out[key] = json.loads(raw)
        except json.JSONDecodeError:
            out[key] = raw  # a bare string, e.g. --set load_format=dummy
    return out


def server_fields(args: argparse.Namespace) -> dict[str, Any]:
    """The ServerArgs fields of this command, resolved as SGLang resolves them for GLM-5.3 on args.isa."""
    kv = _resolved_kv_cache_dtype(isa=args.isa, kv_cache_dtype=args.kv_cache_dtype)
    fields = {
        "tp_size": args.tp,
        "dtype": args.dtype,
        "kv_cache_dtype": kv,
        "page_size": args.page_size,
        "attention_backend": args.attention_backend,
        "dsa_decode_backend": args.dsa_decode_backend or _default_decode_backend(isa=args.isa, kv_cache_dtype=kv),
        "enable_amd_monokernel": True,
    }
    if args.speculative_algorithm:
        steps = args.speculative_num_steps
        fields.update(
            speculative_algorithm=args.speculative_algorithm,
            speculative_num_steps=steps,
            speculative_eagle_topk=args.speculative_eagle_topk,
            speculative_num_draft_tokens=args.speculative_num_draft_tokens or (steps + 1 if steps else None),
        )
    fields.update(_parse_sets(args.set, flag="--set"))
    return fields


def explain(*, model: str, config_overrides: dict[str, Any], fields: dict[str, Any], isa: str) -> dict[str, Any]:
    """SGLang's answer for this setup: spec name, reasons, step keys and the build status."""
    import sgl_amd_mono
    from sglang.kernels.plugin_kernels.amd.spec import ShapeKey
    from sglang.srt.arg_groups.overrides import model_config_of, resolving_view
    from sglang.srt.kernel_plugins.amd.binding import monokernel_disable_reasons
    from sglang.srt.server_args import ServerArgs

    from sgl_amd_mono.glm53.config import load_hf_config

    hf_config = load_hf_config(model)
    for key, value in config_overrides.items():
        setattr(hf_config, key, value)
    sgl_amd_mono.register()
    with tempfile.TemporaryDirectory(prefix="sgl-amd-mono-explain-") as folder:
        hf_config.save_pretrained(folder)  # ModelConfig reads a model folder; no weights in it
        try:
            server_args = ServerArgs(model_path=folder, **fields)
        except TypeError as e:
            raise BadInput(f"not a ServerArgs field: {e}") from e
        cfg = resolving_view(server_args)
        spec, reasons = monokernel_disable_reasons(cfg=cfg, model_config=model_config_of(server_args), isa=isa)
    answer = {"isa": isa, "spec": spec.name if spec else None, "reasons": list(reasons), "keys": [], "unverified": [],
              "evidence": None}
    if spec is None:
        return answer
    from sgl_amd_mono.glm53.served import serving
    from sgl_amd_mono.glm53.spec import launch_widths

    rule = serving(isa, int(cfg.tp_size))  # the spec asks it for this host's GPU; explain, for --isa
    answer["reasons"] += [r for r in rule.reasons if r not in answer["reasons"]]
    answer["unverified"], answer["evidence"] = list(rule.unverified), rule.evidence

    tokens = int(cfg.speculative_num_draft_tokens or 1) if cfg.speculative_algorithm else 1
    mode = "target_verify" if cfg.speculative_algorithm else "decode"
    widths = launch_widths(isa=isa, tp=int(cfg.tp_size)) if isa in spec.devices else ()
    answer["keys"] = [
        ShapeKey(forward_mode=mode, batch_size=w // tokens, tokens_per_request=tokens) for w in widths if w % tokens == 0
    ]
    return answer


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="sgl-amd-mono", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("explain", help="whether --enable-amd-monokernel would serve a GLM-5.3 setup, and why not")
    p.add_argument("--model", default="glm-5.3", help="the glm-5.3 preset, a config.json or a model folder")
    p.add_argument("--config", action="append", default=[], metavar="FIELD=JSON", help="override an HF config field")
    p.add_argument("--isa", default=DEFAULT_ISA, help="gfx950, gfx942, sm_90, ...")
    p.add_argument("--tp", type=int, default=8)
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--kv-cache-dtype", default="auto")
    p.add_argument("--page-size", type=int, default=64)
    p.add_argument("--attention-backend", default="dsa")
    p.add_argument("--dsa-decode-backend", default=None, help="default: SGLang's for the ISA and KV dtype")
    p.add_argument("--speculative-algorithm", default=None)
    p.add_argument("--speculative-num-steps", type=int, default=None)
    p.add_argument("--speculative-eagle-topk", type=int, default=None)
    p.add_argument("--speculative-num-draft-tokens", type=int, default=None)
    p.add_argument("--set", action="append", default=[], metavar="FIELD=JSON", help="any other ServerArgs field")
    p.add_argument("--exit-code", action="store_true",
                   help="exit 1 when the setup is refused (default: 0 whenever an answer is printed)")
    c = sub.add_parser("check-report", help="the summary and plot of an SGLANG_AMD_MONO_CHECK=1 report (JSON lines)")
    c.add_argument("file", help="the report (SGLANG_AMD_MONO_CHECK_REPORT)")
    c.add_argument("--plot", default=None, help="the PNG to write (default: the report's name with .png)")
    c.add_argument("--exit-code", action="store_true", help="exit 1 when a value is outside its bound")
    return parser


def check_report_main(args: argparse.Namespace) -> int:
    from sgl_amd_mono.glm53.audit_report import check_report, plot

    try:
        summary, records, png = check_report(args.file, plot_path=args.plot)
    except (ValueError, OSError) as e:
        print(f"sgl-amd-mono check-report: {e}", file=sys.stderr)
        return 2
    print(summary.format())
    try:
        plot(records, png)
    except ImportError as e:  # matplotlib is the plot's alone: a GPU host may lack it
        print(f"sgl-amd-mono check-report: no plot ({e}): run check-report where matplotlib is installed",
              file=sys.stderr)
        return 2
    print(f"plot: {png}")
    return 1 if args.exit_code and summary.violations else 0


def _format_keys(keys: list) -> str:
    return ", ".join(f"{k.forward_mode} batch {k.batch_size} x {k.tokens_per_request} = {k.rows} rows" for k in keys)


# SGLang's import-time warnings about platforms the answer is not about (its AWQ and GGUF modules on a CPU host)
_FOREIGN_WARNINGS = r"Only CUDA, .* support (AWQ|GGUF)"


def main(argv: Optional[Sequence[str]] = None) -> int:
    warnings.filterwarnings("ignore", message=_FOREIGN_WARNINGS, category=UserWarning)
    parser = _parser()
    args = parser.parse_args(argv)  # exits 2 on a bad flag
    if args.command == "check-report":
        return check_report_main(args)
    try:
        if args.tp < 1 or args.page_size < 1:
            raise BadInput(f"--tp {args.tp} and --page-size {args.page_size} must be positive")
        if args.speculative_num_steps is not None and args.speculative_num_steps < 1:
            raise BadInput(f"--speculative-num-steps {args.speculative_num_steps} must be positive")
        answer = explain(
            model=args.model,
            config_overrides=_parse_sets(args.config, flag="--config"),
            fields=server_fields(args),
            isa=args.isa,
        )
    except (BadInput, ValueError, OSError) as e:  # load_hf_config names a bad model source
        print(f"sgl-amd-mono explain: bad input: {e}", file=sys.stderr)
        return 2
    is_served = _report(args, answer)
    return 0 if is_served or not args.exit_code else 1


def _report(args: argparse.Namespace, answer: dict[str, Any]) -> bool:
    """Print the answer; True when the launches would serve this setup."""
    print(f"model {args.model} on {args.isa}, spec {answer['spec']}")
    if answer["reasons"]:
        print("refused at startup:")
        for reason in answer["reasons"]:
            print(f"  - {reason}")
        return False
    print(f"startup checks pass; steps the launches take: {_format_keys(answer['keys']) or 'none'}")
    if not answer["keys"]:
        print("refused: no width holds this server's steps")
        return False
    from sgl_amd_mono.glm53.served import DRAFT_NOTE

    for what in answer["unverified"]:
        print(f"UNVERIFIED (SGLANG_AMD_MONO_UNVERIFIED=1): {what}")
    print(f"(verified by {answer['evidence']})" if answer["evidence"] else "(unverified: the startup log warns)")
    print(f"note: {DRAFT_NOTE}")
    print("served")
    return True

if __name__ == "__main__":
    sys.exit(main())
