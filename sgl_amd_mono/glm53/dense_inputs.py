"""Random dense-MLP weights, embeddings and token steps in SGLang's layouts, for the dense and tokens kinds'
checks. Every rank's shard is cut from one full (TP1) draw, as `launch_inputs.random_weights`. Nothing here is a
model's weights."""

from __future__ import annotations

import dataclasses
import functools

import torch

from sgl_amd_mono.glm53.config import Glm53Geometry
from sgl_amd_mono.glm53.index_inputs import IndexStep
from sgl_amd_mono.glm53.launch_inputs import _fp8_linear
from sgl_amd_mono.glm53.layer import DenseWeights


@dataclasses.dataclass(frozen=True)
class EmbedWeights:
    embed: torch.Tensor  # model.embed_tokens.weight [vocab / tp, D] bf16: this rank's rows


@dataclasses.dataclass
class TokensStep(IndexStep):
    """An indexer step whose rows come as token ids (layer 0). The launch reads `input_ids`; `hidden` and
    `residual` are what the oracle takes (`with_embedding_rows`: the ids' embedding rows, no residual)."""

    input_ids: torch.Tensor = None  # [R] int64 (pad rows: any id in the vocab, as SGLang's stale ids)


def random_dense_weights(geo: Glm53Geometry, *, tp: int, seed: int = 0, device="cpu", rank: int = 0) -> DenseWeights:
    """Rank `rank`'s shard of one full draw of a dense MLP: gate_up's gate rows and up rows of the rank's
    intermediate columns (SGLang's MergedColumnParallelLinear), down's columns of them (RowParallelLinear)."""
    g = torch.Generator(device=device).manual_seed(seed)
    full, i = geo.dense_inter, geo.shard(tp).dense_inter
    gate_up, gate_up_s = _fp8_linear(2 * full, geo.hidden, g, device)
    down, down_s = _fp8_linear(geo.hidden, full, g, device)
    if tp == 1:
        return DenseWeights(gate_up=gate_up, gate_up_s=gate_up_s, down=down, down_s=down_s)
    both = lambda t, n, whole: torch.cat((t[rank * n:(rank + 1) * n], t[whole + rank * n:whole + (rank + 1) * n]))  # noqa: E731
    return DenseWeights(gate_up=both(gate_up, i, full), gate_up_s=both(gate_up_s, i // 128, full // 128),
                        down=down[:, rank * i:(rank + 1) * i].contiguous(),
                        down_s=down_s[:, rank * i // 128:(rank + 1) * i // 128].contiguous())


def random_embedding(geo: Glm53Geometry, *, tp: int, seed: int = 0, device="cpu", rank: int = 0) -> EmbedWeights:
    """Rank `rank`'s vocab rows of one full draw of the embedding (SGLang's VocabParallelEmbedding, rank order)."""
    e = _full_embedding(geo.vocab, geo.hidden, seed)
    v = geo.shard(tp).vocab
    return EmbedWeights(embed=e[rank * v:(rank + 1) * v].contiguous().to(device))


@functools.lru_cache(maxsize=1)
def _full_embedding(vocab: int, hidden: int, seed: int) -> torch.Tensor:
    """One full draw on the CPU (GLM-5.3's takes seconds), kept for the next rank's shard."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    return torch.randn(vocab, hidden, generator=g).to(torch.bfloat16)


def tokens_step(step: IndexStep, vocab: int, *, seed: int) -> TokensStep:
    """`step` with a random token id in [0, vocab) a row (pad rows too)."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    ids = torch.randint(0, vocab, (step.hidden.shape[0],), generator=g).to(step.hidden.device)
    return TokensStep(**{f.name: getattr(step, f.name) for f in dataclasses.fields(step)}, input_ids=ids)


def with_embedding_rows(step: TokensStep, embed: EmbedWeights) -> TokensStep:
    """The step as the oracle takes layer 0: hidden = the ids' embedding rows, residual None."""
    return dataclasses.replace(step, hidden=embed.embed[step.input_ids], residual=None)
