"""The maths several training methods share, as pure typed torch functions.

No `nn.Module` state and no I/O: every function maps tensors (and plain numbers) to tensors, and
every random draw goes through an explicit `torch.Generator`, so a call is deterministic given its
arguments. Similarities are cosine similarities throughout (``sim`` / ``Ψ`` in the papers). The
maths only one method uses lives in that method's file, with the notes on how its paper was read:
SSCL's intermediate-layer negatives in `sscl`, IS-CSE's buffer, smoothing and α schedule in
`iscse`, DCLR's noise, non-uniformity ascent and instance weights in `dclr`.

Papers, equations and where they live
-------------------------------------
SimCSE, unsupervised (Gao, Yao & Chen, 2021, "SimCSE: Simple Contrastive Learning of Sentence
Embeddings"), eq. 1: ``l_i = -log e^{sim(h_i,h_i^+)/τ} / Σ_{j=1}^N e^{sim(h_i,h_j^+)/τ}``, two
dropout views, in-batch negatives, τ = 0.05 -> `cosine_matrix`, `info_nce`, `gather_with_grad`
(the all-gather that turns per-process batches into one batch of negatives).
SSCL eq. 3, IS-CSE eq. 1-2 (``L_instance``, ``sim``) and DCLR eq. 6 (the weighted contrastive
loss) are the same `info_nce` / `cosine_matrix`.

Composition. Every objective is one call of `info_nce` (plus IS-CSE's second call), so the
combinations add their parts to ONE denominator: ``sscl+dclr`` is
``info_nce(h, h_pos, τ, extra_negatives=[noise, sscl.sscl_negatives(...)],
negative_weights=dclr.complementary_weights(...).weights)``, and ``iscse+dclr`` is
DCLR's ``info_nce(...) + α · iscse.smoothing_loss(h, iscse.knn_aggregate(...), τ)`` (IS-CSE
Table 1, "+DCLR": "We add our L_smoothing to the DCLR").

Ambiguities resolved (and how)
------------------------------
1. What the denominator contains. SimCSE eq. 1 and IS-CSE eq. 1 sum over all N positives
   ``h_j^+`` (so the positive itself is in the denominator); SSCL eq. 3 writes ``Ψ(h_i, h_j)`` and
   DCLR eq. 6 sums over negatives only. All released code (SimCSE-derived) uses cross-entropy over
   ``sim(h_i, h_j^+)`` with the label on the diagonal, so `info_nce` always puts the positive in the
   denominator with weight 1, and the in-batch negatives are the other views ``h_j^+``.
2. A weight of 0 removes a term exactly: weights enter as ``logit + log w`` with ``-inf`` where
   ``w == 0`` inside a log-sum-exp, never as ``w × exp(logit)``.
3. Similarities and losses run in fp32 with autocast off (`in_fp32`), also when the encoder runs
   under bf16/fp16 autocast: the papers' logits are cos/τ with τ = 0.05.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Literal, ParamSpec, TypeVar

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor

P = ParamSpec("P")
R = TypeVar("R")

__all__ = [
    "NORM_EPS",
    "Reduction",
    "check_pairs",
    "check_temperature",
    "cosine_matrix",
    "gather_with_grad",
    "in_fp32",
    "info_nce",
    "normalize",
    "reduce_losses",
]

Reduction = Literal["mean", "sum", "none"]
ExtraNegatives = Tensor | Sequence[Tensor] | None
ExtraWeights = Tensor | Sequence[Tensor | None] | None

NORM_EPS = 1e-12


# --------------------------------------------------------------------------------------------
# Shared helpers
# --------------------------------------------------------------------------------------------


def _fp32_argument(value: object) -> object:
    if isinstance(value, Tensor) and value.dtype in (torch.float16, torch.bfloat16):
        return value.float()
    if isinstance(value, list | tuple) and any(isinstance(v, Tensor) for v in value):
        return type(value)(_fp32_argument(v) for v in value)
    return value


def in_fp32(function: Callable[P, R]) -> Callable[P, R]:
    """Run a loss or similarity with autocast off and half-precision inputs cast to fp32.

    At τ = 0.05 a cosine logit of 20 moves in steps of 0.125 in bf16 (8-bit mantissa), which
    blurs the in-batch softmax; CUDA autocast keeps `cosine_similarity` and the losses in fp32
    for the same reason (SimCSE's fp16 code relies on it). Embeddings are [B, d], so this costs
    nothing next to the encoder.
    """

    @functools.wraps(function)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        tensors = [a for a in (*args, *kwargs.values()) if isinstance(a, Tensor)]
        device = tensors[0].device.type if tensors else "cpu"
        with torch.autocast(device, enabled=False):
            args = tuple(_fp32_argument(a) for a in args)  # type: ignore[assignment]
            kwargs = {k: _fp32_argument(v) for k, v in kwargs.items()}  # type: ignore[assignment]
            return function(*args, **kwargs)

    return wrapper


def normalize(x: Tensor) -> Tensor:
    return F.normalize(x, p=2.0, dim=-1, eps=NORM_EPS)


def reduce_losses(losses: Tensor, reduction: Reduction) -> Tensor:
    if reduction == "mean":
        return losses.mean()
    if reduction == "sum":
        return losses.sum()
    if reduction == "none":
        return losses
    raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")


def check_pairs(anchors: Tensor, positives: Tensor) -> None:
    if anchors.dim() != 2 or positives.dim() != 2:
        raise ValueError(
            f"anchors and positives must be [B, d], got {tuple(anchors.shape)} and "
            f"{tuple(positives.shape)}"
        )
    if anchors.shape != positives.shape:
        raise ValueError(
            f"anchors {tuple(anchors.shape)} and positives {tuple(positives.shape)} differ"
        )


def check_temperature(temperature: float) -> None:
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")


def _weighted_logits(logits: Tensor, weights: Tensor | None, what: str) -> Tensor:
    """``logits + log(weights)``, exactly ``-inf`` where a weight is 0 (the term disappears)."""
    if weights is None:
        return logits
    w = torch.as_tensor(weights, dtype=logits.dtype, device=logits.device)
    try:
        w = w.expand_as(logits)
    except RuntimeError as err:
        raise ValueError(
            f"{what}: shape {tuple(w.shape)} does not broadcast to {tuple(logits.shape)}"
        ) from err
    valid = ~((w < 0) | torch.isnan(w)).any()
    if w.device.type == "cpu":
        if not bool(valid):
            raise ValueError(f"{what}: weights must be >= 0")
    else:  # checked on the device: a training step never waits for it
        torch._assert_async(valid, f"{what}: weights must be >= 0")
    # clamp so that log() and its gradient stay finite where w == 0; where() then drops those.
    log_w = torch.log(w.clamp_min(torch.finfo(logits.dtype).tiny))
    return torch.where(w > 0, logits + log_w, torch.full_like(logits, -math.inf))


def _extra_similarities(anchors_n: Tensor, extra: Tensor) -> Tensor:
    """Cosine of each anchor with shared ``[M, d]`` or per-anchor ``[B, m, d]`` negatives."""
    batch, dim = anchors_n.shape
    if extra.shape[-1] != dim:
        raise ValueError(f"extra negatives have dimension {extra.shape[-1]}, anchors {dim}")
    if extra.dim() == 2:
        return anchors_n @ normalize(extra).transpose(0, 1)
    if extra.dim() == 3:
        if extra.shape[0] != batch:
            raise ValueError(
                f"per-anchor extra negatives must be [B={batch}, m, d], got {tuple(extra.shape)}"
            )
        return torch.einsum("bd,bmd->bm", anchors_n, normalize(extra))
    raise ValueError(f"extra negatives must be [M, d] or [B, m, d], got {tuple(extra.shape)}")


def _extra_lists(
    extra_negatives: ExtraNegatives, extra_weights: ExtraWeights
) -> list[tuple[Tensor, Tensor | None]]:
    if extra_negatives is None:
        if extra_weights is not None:
            raise ValueError("extra_weights given without extra_negatives")
        return []
    if isinstance(extra_negatives, Tensor):
        if extra_weights is not None and not isinstance(extra_weights, Tensor):
            raise ValueError("one extra_negatives tensor takes one extra_weights tensor (or None)")
        return [(extra_negatives, extra_weights)]
    negatives = list(extra_negatives)
    if extra_weights is None:
        return [(n, None) for n in negatives]
    if isinstance(extra_weights, Tensor):
        raise ValueError("a sequence of extra_negatives takes a sequence of extra_weights")
    weights = list(extra_weights)
    if len(weights) != len(negatives):
        raise ValueError(
            f"{len(negatives)} extra negative sets but {len(weights)} extra weight entries"
        )
    return list(zip(negatives, weights, strict=True))


# --------------------------------------------------------------------------------------------
# SimCSE: cosine similarity, InfoNCE, all-gather
# --------------------------------------------------------------------------------------------


@in_fp32
def cosine_matrix(a: Tensor, b: Tensor) -> Tensor:
    """Pairwise cosine similarities ``[n, m]`` of ``a [n, d]`` and ``b [m, d]``.

    SimCSE (Gao et al., 2021) §2 / IS-CSE eq. 2: ``sim(h_i, h_j) = h_i^T h_j / (‖h_i‖ ‖h_j‖)``.
    A zero row has similarity 0 with everything (its norm is clamped at 1e-12).
    """
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[1]:
        raise ValueError(f"expected [n, d] and [m, d], got {tuple(a.shape)} and {tuple(b.shape)}")
    return normalize(a) @ normalize(b).transpose(0, 1)


@in_fp32
def info_nce(
    anchors: Tensor,
    positives: Tensor,
    temperature: float,
    extra_negatives: ExtraNegatives = None,
    negative_weights: Tensor | None = None,
    extra_weights: ExtraWeights = None,
    reduction: Reduction = "mean",
) -> Tensor:
    """Weighted InfoNCE with in-batch and extra negatives (SimCSE eq. 1, generalised).

    ``l_i = -log [ e^{s_ii/τ} / ( e^{s_ii/τ} + Σ_{j≠i} w_ij e^{s_ij/τ} + Σ_k v_ik e^{s'_ik/τ} ) ]``

    with ``s_ij = cos(anchors_i, positives_j)`` (SimCSE eq. 1, IS-CSE eq. 1, SSCL eq. 3) and
    ``s'_ik = cos(anchors_i, extra_k)``: the extra negatives of SSCL eq. 4
    (`sscl.sscl_negatives`) or DCLR eq. 6 (`dclr.noise_negatives`). ``w_ij`` are DCLR eq. 5
    instance weights (`dclr.complementary_weights`), default 1; the positive ``s_ii`` always has
    weight 1, whatever the
    diagonal of ``negative_weights`` says.

    Args:
        anchors: ``[B, d]`` (``h_i``, first dropout view). Need not be normalised.
        positives: ``[B, d]`` (``h_i^+``); row j is anchor i's negative for j ≠ i.
        temperature: τ (0.05 for unsupervised SimCSE).
        extra_negatives: ``[M, d]`` shared by every anchor, ``[B, m, d]`` per anchor (row i's own
            m negatives), or a sequence mixing both kinds (e.g. DCLR noise + SSCL "self").
        negative_weights: ``[B, B]`` non-negative weights of the in-batch terms.
        extra_weights: weights of the extra negatives, broadcastable to ``[B, M]`` / ``[B, m]``
            (one entry per extra set when ``extra_negatives`` is a sequence, None = all 1).
        reduction: ``"mean"`` over anchors (the papers' loss), ``"sum"`` or ``"none"`` (``[B]``).

    A weight of 0 removes its term exactly (``-inf`` logit, see module note 2) and gives that
    negative no gradient; computation is a log-sum-exp, stable for any τ.
    """
    check_pairs(anchors, positives)
    check_temperature(temperature)
    anchors_n = normalize(anchors)
    logits = anchors_n @ normalize(positives).transpose(0, 1) / temperature
    positive_logits = logits.diagonal()
    in_batch = _weighted_logits(logits, negative_weights, "negative_weights")
    if negative_weights is not None:
        eye = torch.eye(logits.shape[0], dtype=torch.bool, device=logits.device)
        in_batch = torch.where(eye, logits, in_batch)
    columns = [in_batch]
    for index, (extra, weights) in enumerate(_extra_lists(extra_negatives, extra_weights)):
        extra_logits = _extra_similarities(anchors_n, extra) / temperature
        columns.append(_weighted_logits(extra_logits, weights, f"extra_weights[{index}]"))
    all_logits = torch.cat(columns, dim=1)
    losses = torch.logsumexp(all_logits, dim=1) - positive_logits
    return reduce_losses(losses, reduction)


def gather_with_grad(t: Tensor) -> Tensor:
    """All-gather ``t [b, ...]`` from every process into ``[world × b, ...]``, keeping gradients.

    SimCSE's multi-GPU training contrasts against the negatives of all processes. Uses
    `torch.distributed.nn.functional.all_gather`, whose backward sums the gradient every process
    computes for this process's shard (the exact gradient of the sum of the per-process losses;
    DDP's averaging then yields that of their mean). Every process must pass the same shape.
    Rows are in rank order, so rank r's shard starts at ``r × b``. Identity when
    torch.distributed is unavailable, not initialised, or has a single process.
    """
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return t
    from torch.distributed.nn.functional import all_gather

    return torch.cat(all_gather(t.contiguous()), dim=0)
