"""The shared maths of the training methods, as pure typed torch functions.

No `nn.Module` state and no I/O: every function maps tensors (and plain numbers) to tensors, and
every random draw goes through an explicit `torch.Generator`, so a call is deterministic given its
arguments. Similarities are cosine similarities throughout (``sim`` / ``Ψ`` in the papers).

Papers, equations and where they live
-------------------------------------
SimCSE, unsupervised (Gao, Yao & Chen, 2021, "SimCSE: Simple Contrastive Learning of Sentence
Embeddings"), eq. 1: ``l_i = -log e^{sim(h_i,h_i^+)/τ} / Σ_{j=1}^N e^{sim(h_i,h_j^+)/τ}``, two
dropout views, in-batch negatives, τ = 0.05 -> `cosine_matrix`, `info_nce`, `gather_with_grad`
(the all-gather that turns per-process batches into one batch of negatives).

SSCL (Chen et al., 2023, "Alleviating Over-smoothing for Unsupervised Sentence Representation"):
eq. 3 (traditional contrastive loss) -> `info_nce`; eq. 4 (``L_hne``: intermediate-layer
negatives ``h_i^-``) and §5.2 "Progressive SSCL" (stack the last k layers) -> `sscl_negatives`
passed to `info_nce` as extra negatives.

IS-CSE (He et al., 2023, "Instance Smoothed Contrastive Learning for Unsupervised Sentence
Embedding"): eq. 1 (``L_instance``) -> `info_nce`; eq. 2 -> `cosine_matrix`; eq. 3 (FIFO buffer of
normalised stop-gradient positives) -> `fifo_enqueue`; eq. 4 (kNN + self-attention aggregation)
-> `knn_indices`, `knn_aggregate`; eq. 5 (K-means centre mixing) -> `spherical_kmeans`,
`kmeans_aggregate`; eq. 6 (``L_smoothing``) -> `smoothing_loss`; eq. 7
(``L = L_instance + α L_smoothing``) -> the method adds α `smoothing_loss` as a term; eq. 8
(cosine α schedule) -> `alpha_schedule`.

DCLR (Zhou et al., 2022, "Debiased Contrastive Learning of Unsupervised Sentence
Representations"): eq. 1 (Gaussian noise negatives, k = ratio × batch size, §5.1/§6.5) ->
`noise_negatives`; eq. 2 (non-uniformity loss ``L_U``) -> `non_uniformity_loss`; eq. 3-4
(normalised gradient ascent on ``L_U``) -> `non_uniformity_ascent`; eq. 5 (0/1 instance weights
from the complementary model) -> `complementary_weights`; eq. 6 (weighted contrastive loss) ->
`info_nce` with the noise as extra negatives and those weights. (The brief that asked for this
module numbered the noise as eq. 2; in the paper the noise is eq. 1 and ``L_U`` eq. 2.)

Composition. Every objective is one call of `info_nce` (plus IS-CSE's second call), so the
combinations add their parts to ONE denominator: ``sscl+dclr`` is
``info_nce(h, h_pos, τ, extra_negatives=[noise, sscl_negatives(...)],
negative_weights=complementary_weights(...).weights)``, and ``iscse+dclr`` is
DCLR's ``info_nce(...) + α · smoothing_loss(h, knn_aggregate(...), τ)`` (IS-CSE Table 1, "+DCLR":
"We add our L_smoothing to the DCLR").

Ambiguities resolved (and how)
------------------------------
1. What the denominator contains. SimCSE eq. 1 and IS-CSE eq. 1 sum over all N positives
   ``h_j^+`` (so the positive itself is in the denominator); SSCL eq. 3 writes ``Ψ(h_i, h_j)`` and
   DCLR eq. 6 sums over negatives only. All released code (SimCSE-derived) uses cross-entropy over
   ``sim(h_i, h_j^+)`` with the label on the diagonal, so `info_nce` always puts the positive in the
   denominator with weight 1, and the in-batch negatives are the other views ``h_j^+``.
2. SSCL eq. 4 literally reads ``Σ^N (e^{Ψ(h_i,h_j)/τ} + e^{Ψ(h_i,h_i^-)/τ})``, which counts the
   sentence's own intermediate vector N times. Two readings are offered (`sscl_negatives`):
   "self" -- each anchor's own intermediate vector(s) once each (``extra_weights=N`` would recover
   the literal N-fold count); "batch" -- "SSCL enlarges the size of mini-batch negatives from N
   pairs to 2N pairs" (App. B.2) and the authors' released code (`construct_negtives`): the pooled
   intermediate-layer vectors of every sentence, both dropout views, of each of the last k layers,
   are shared negatives, and that loss is averaged with the plain SimCSE loss
   (``loss = (loss + r_loss) / 2``; the `sscl.average_with_simcse` param). The anchor is the
   last-layer ``h_i`` ("we treat the last layer representation as the final sentence
   representation"), the temperature is the same τ = 0.05 ("τ is set to 0.05"), the layers are the
   M-th (best: 11 of 12) or, progressively, the last k stacked ("stacking 2 layers represents
   utilizing 11-th and 10-th transformer layers"). The intermediate vectors are not detached
   (neither the paper nor the code stops their gradient).
3. IS-CSE eq. 4: the query is part of the aggregation ("K = {h^+, h^r_1, ..., h^r_k}"), every row
   is L2-normalised ("we normalize and then concatenate them"), the scores are divided by β ("a
   larger β will make the attention weights more even"; released code ``/2.`` with β = 2), the
   retrieved rows are stop-gradient and ``h^+`` is not ("h^+ is not a stop-gradient embedding but
   the retrieved embeddings h^r and centers c^+ are"). The released code enqueues the current batch
   *before* retrieving and then drops the best hit (the query's own copy): `knn_indices` takes
   ``skip_top`` (0 = the paper's reading, 1 = the code's).
4. IS-CSE eq. 5: "we directly retrieve the center embedding to which h^+ belongs": the buffer is
   clustered by spherical (cosine) K-means with renormalised centres and a fixed number of
   iterations from a seeded initialisation, ``h^+`` belongs to its most similar centre, and ``h^+``
   is normalised before the mix (as in eq. 4) so that γ mixes two unit vectors.
5. IS-CSE eq. 8: ``α = min{cos(π T_i/T_max)(α_start - α_end), 0} + α_end`` with α_start = 0.005,
   α_end = 0.05 ("a cosine schedule ... from 0.005 to 0.05", "gradually increase"). Read literally
   (and as in the released `cosineSchedule`, ``if alpha >= end: return end``) α rises from α_start
   at step 0 to α_end at *mid*-training and stays there; `alpha_schedule` implements exactly that
   and rejects α_start > α_end, for which the ``min`` makes the formula meaningless.
6. DCLR eq. 2 has only the noise in its denominator, so its numerator ``sim(h_i, h_i^+)`` is a
   constant for the noise and the gradient of eq. 4 is that of ``Σ_i log Σ_j e^{sim(h_i,ĥ_j)/τ_u}``;
   "maximizing the non-uniformity loss" means ascent (``+β g/‖g‖``, eq. 3), the gradient is
   normalised per noise vector, it is taken w.r.t. the noise only (anchors detached), and the
   projection Π, which the paper never defines, is the identity unless ``max_norm`` asks for the
   L2 ball. The returned noise is detached: the encoder loss may push the anchors away from it,
   but no gradient flows into it.
7. DCLR eq. 5 weights "a negative representation h^- from {h̃^-} or {ĥ^-}", but a noise vector has no
   text for the complementary model to encode: noise negatives get weight 1 unless the caller
   passes ``noise_weights``. The positive is always kept (its complementary similarity with the
   original sentence is ≈1 ≥ φ and would otherwise be zeroed); a negative is dropped when
   ``sim_C ≥ φ`` (φ = 0.9), kept when ``< φ``.
8. DCLR "k is the ratio of the noise-based negatives to the batch size" and "we generate
   1 × batch_size noise-based negatives as the common negatives of all instance in it": one shared
   ``[round(ratio × B), d]`` set for the whole batch.
9. A weight of 0 removes a term exactly: weights enter as ``logit + log w`` with ``-inf`` where
   ``w == 0`` inside a log-sum-exp, never as ``w × exp(logit)``.
10. Similarities and losses run in fp32 with autocast off (`in_fp32`), also when the encoder runs
   under bf16/fp16 autocast: the papers' logits are cos/τ with τ = 0.05.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Literal, NamedTuple, ParamSpec, TypeVar

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor

P = ParamSpec("P")
R = TypeVar("R")

__all__ = [
    "ComplementaryWeights",
    "KMeansResult",
    "alpha_schedule",
    "complementary_weights",
    "cosine_matrix",
    "fifo_enqueue",
    "gather_with_grad",
    "info_nce",
    "kmeans_aggregate",
    "knn_aggregate",
    "knn_indices",
    "noise_negatives",
    "non_uniformity_ascent",
    "non_uniformity_loss",
    "smoothing_loss",
    "spherical_kmeans",
    "sscl_negatives",
]

Reduction = Literal["mean", "sum", "none"]
SSCLVariant = Literal["self", "batch"]
AlphaKind = Literal["constant", "cosine"]
ExtraNegatives = Tensor | Sequence[Tensor] | None
ExtraWeights = Tensor | Sequence[Tensor | None] | None

_NORM_EPS = 1e-12


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


def _normalize(x: Tensor) -> Tensor:
    return F.normalize(x, p=2.0, dim=-1, eps=_NORM_EPS)


def _reduce(losses: Tensor, reduction: Reduction) -> Tensor:
    if reduction == "mean":
        return losses.mean()
    if reduction == "sum":
        return losses.sum()
    if reduction == "none":
        return losses
    raise ValueError(f"reduction must be 'mean', 'sum' or 'none', got {reduction!r}")


def _check_pairs(anchors: Tensor, positives: Tensor) -> None:
    if anchors.dim() != 2 or positives.dim() != 2:
        raise ValueError(
            f"anchors and positives must be [B, d], got {tuple(anchors.shape)} and "
            f"{tuple(positives.shape)}"
        )
    if anchors.shape != positives.shape:
        raise ValueError(
            f"anchors {tuple(anchors.shape)} and positives {tuple(positives.shape)} differ"
        )


def _check_temperature(temperature: float) -> None:
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
    if bool((w < 0).any()) or bool(torch.isnan(w).any()):
        raise ValueError(f"{what}: weights must be >= 0")
    # clamp so that log() and its gradient stay finite where w == 0; where() then drops those.
    log_w = torch.log(w.clamp_min(torch.finfo(logits.dtype).tiny))
    return torch.where(w > 0, logits + log_w, torch.full_like(logits, -math.inf))


def _extra_similarities(anchors_n: Tensor, extra: Tensor) -> Tensor:
    """Cosine of each anchor with shared ``[M, d]`` or per-anchor ``[B, m, d]`` negatives."""
    batch, dim = anchors_n.shape
    if extra.shape[-1] != dim:
        raise ValueError(f"extra negatives have dimension {extra.shape[-1]}, anchors {dim}")
    if extra.dim() == 2:
        return anchors_n @ _normalize(extra).transpose(0, 1)
    if extra.dim() == 3:
        if extra.shape[0] != batch:
            raise ValueError(
                f"per-anchor extra negatives must be [B={batch}, m, d], got {tuple(extra.shape)}"
            )
        return torch.einsum("bd,bmd->bm", anchors_n, _normalize(extra))
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
    return _normalize(a) @ _normalize(b).transpose(0, 1)


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
    ``s'_ik = cos(anchors_i, extra_k)``: the extra negatives of SSCL eq. 4 (`sscl_negatives`) or
    DCLR eq. 6 (`noise_negatives`). ``w_ij`` are DCLR eq. 5 instance weights
    (`complementary_weights`), default 1; the positive ``s_ii`` always has weight 1, whatever the
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

    A weight of 0 removes its term exactly (``-inf`` logit, see module note 9) and gives that
    negative no gradient; computation is a log-sum-exp, stable for any τ.
    """
    _check_pairs(anchors, positives)
    _check_temperature(temperature)
    anchors_n = _normalize(anchors)
    logits = anchors_n @ _normalize(positives).transpose(0, 1) / temperature
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
    return _reduce(losses, reduction)


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


# --------------------------------------------------------------------------------------------
# SSCL: intermediate-layer negatives
# --------------------------------------------------------------------------------------------


def sscl_negatives(intermediate: Sequence[Tensor], variant: SSCLVariant) -> Tensor:
    """Intermediate-layer negatives ``h_i^-`` of SSCL eq. 4, in the form `info_nce` takes.

    Args:
        intermediate: pooled intermediate-layer sentence vectors, each ``[B, d]`` with row i
            belonging to sentence i: one layer (SSCL, best the 11th of 12), the last k layers
            (Progressive SSCL, §5.2, best k = 2: layers 11 and 10), and for the released-code
            reading both dropout views of each layer.
        variant: ``"self"``: each sentence's own vectors are its only extra negatives ->
            ``[B, m, d]`` (m = len(intermediate)), the literal ``Ψ(h_i, h_i^-)`` of eq. 4;
            ``"batch"``: every sentence's vectors are shared negatives of every anchor ->
            ``[m × B, d]``, as in the authors' code (App. B.2: "from N pairs to 2N pairs").

    The tensors are not detached (module note 2), so the loss also pushes the intermediate
    layers away from the final one.
    """
    layers = list(intermediate)
    if not layers:
        raise ValueError("intermediate must hold at least one [B, d] tensor")
    shape = layers[0].shape
    if len(shape) != 2 or any(t.shape != shape for t in layers):
        shapes = [tuple(t.shape) for t in layers]
        raise ValueError(f"every intermediate tensor must be the same [B, d], got {shapes}")
    if variant == "self":
        return torch.stack(layers, dim=1)
    if variant == "batch":
        return torch.cat(layers, dim=0)
    raise ValueError(f"variant must be 'self' or 'batch', got {variant!r}")


# --------------------------------------------------------------------------------------------
# IS-CSE: memory buffer, kNN / K-means smoothing, smoothing loss, α schedule
# --------------------------------------------------------------------------------------------


def fifo_enqueue(buffer: Tensor, embeddings: Tensor) -> Tensor:
    """IS-CSE eq. 3: ``B_new = Concat(B_old[l:L], sg{h^+_1/‖h^+_1‖, ..., h^+_l/‖h^+_l‖})``.

    Returns a new ``[L, d]`` buffer (oldest rows first, newest last); ``l ≥ L`` keeps the newest
    L embeddings. The result never carries a gradient.
    """
    if buffer.dim() != 2 or embeddings.dim() != 2 or buffer.shape[1] != embeddings.shape[1]:
        raise ValueError(
            f"expected buffer [L, d] and embeddings [l, d], got {tuple(buffer.shape)} and "
            f"{tuple(embeddings.shape)}"
        )
    length = buffer.shape[0]
    incoming = _normalize(embeddings.detach()).to(buffer.dtype)
    if incoming.shape[0] >= length:
        return incoming[incoming.shape[0] - length :]
    return torch.cat([buffer.detach()[incoming.shape[0] :], incoming], dim=0)


def knn_indices(queries: Tensor, buffer: Tensor, k: int, skip_top: int = 0) -> Tensor:
    """Indices ``[B, k]`` of each query's k most cosine-similar buffer rows, best first.

    IS-CSE §"Retrieving Sentence Embeddings", kNN: "we calculate the cosine similarity (Equ. 2)
    between h^+ and each of the embedding in buffer B. Then k nearest embeddings are retrieved".
    ``skip_top`` drops that many best hits first (1 when the buffer already holds the current
    batch, as in the released code; module note 3).
    """
    if k < 0 or skip_top < 0:
        raise ValueError(f"k and skip_top must be >= 0, got {k} and {skip_top}")
    if k + skip_top > buffer.shape[0]:
        raise ValueError(f"k + skip_top = {k + skip_top} exceeds the buffer ({buffer.shape[0]})")
    sims = cosine_matrix(queries.detach(), buffer.detach().to(queries.dtype))
    top = torch.topk(sims, k + skip_top, dim=1, largest=True, sorted=True).indices
    return top[:, skip_top:]


@in_fp32
def knn_aggregate(
    queries: Tensor, buffer: Tensor, k: int, beta: float, skip_top: int = 0
) -> Tensor:
    """Smoothed positives ``h^{s+} = softmax(h^+ K^T / β) K`` (IS-CSE eq. 4), ``[B, d]``.

    ``K = [h^+, h^r_1, ..., h^r_k]`` (normalised) stacks the query with its k nearest buffer rows
    (`knn_indices`). Gradient flows into ``queries`` (through the attention weights and the
    query's own row of K) but never into ``buffer`` (stop-gradient). β = 2, k = 16, L = 1024 in
    the paper. Rows of a not-yet-filled zero buffer have cosine 0 with everything; the released
    code only adds the smoothing loss once the buffer is full.
    """
    _check_temperature(beta)
    if queries.dim() != 2 or buffer.dim() != 2 or queries.shape[1] != buffer.shape[1]:
        raise ValueError(
            f"expected queries [B, d] and buffer [L, d], got {tuple(queries.shape)} and "
            f"{tuple(buffer.shape)}"
        )
    buffer = buffer.detach().to(queries.dtype)
    query_n = _normalize(queries)
    index = knn_indices(queries, buffer, k, skip_top)
    retrieved = _normalize(buffer)[index]  # [B, k, d], stop-gradient
    keys = torch.cat([query_n.unsqueeze(1), retrieved], dim=1)  # [B, k + 1, d]
    scores = torch.einsum("bd,bkd->bk", query_n, keys) / beta
    attention = torch.softmax(scores, dim=1)
    return torch.einsum("bk,bkd->bd", attention, keys)


class KMeansResult(NamedTuple):
    """Unit-norm centres ``[C, d]`` and each point's cluster ``[L]``."""

    centers: Tensor
    assignments: Tensor


@in_fp32
def spherical_kmeans(
    points: Tensor,
    num_clusters: int,
    iterations: int = 10,
    *,
    generator: torch.Generator | None = None,
    init_indices: Tensor | None = None,
) -> KMeansResult:
    """Cosine (spherical) K-means of the buffer, for IS-CSE eq. 5 ("we cluster all the embeddings
    in the buffer based on the cosine similarity").

    Points are normalised and detached; each iteration assigns every point to its most similar
    centre (ties: lowest index) and resets each centre to the normalised mean of its members (an
    empty cluster keeps its centre). The initial centres are the points ``init_indices``, or the
    first ``num_clusters`` of a random permutation drawn from ``generator``; one of the two is
    required, so the result is deterministic.
    """
    if points.dim() != 2:
        raise ValueError(f"points must be [L, d], got {tuple(points.shape)}")
    if not 1 <= num_clusters <= points.shape[0]:
        raise ValueError(f"num_clusters must be in [1, {points.shape[0]}], got {num_clusters}")
    if iterations < 0:
        raise ValueError(f"iterations must be >= 0, got {iterations}")
    x = _normalize(points.detach())
    if init_indices is None:
        if generator is None:
            raise ValueError("pass a seeded generator or init_indices for a deterministic start")
        init_indices = torch.randperm(x.shape[0], generator=generator, device=generator.device)
        init_indices = init_indices[:num_clusters]
    init_indices = init_indices.to(device=x.device, dtype=torch.long)
    if init_indices.shape != (num_clusters,):
        raise ValueError(f"init_indices must be [{num_clusters}], got {tuple(init_indices.shape)}")
    centers = x[init_indices].clone()
    for _ in range(iterations):
        assignments = (x @ centers.transpose(0, 1)).argmax(dim=1)
        sums = torch.zeros_like(centers).index_add_(0, assignments, x)
        counts = torch.bincount(assignments, minlength=num_clusters)
        centers = torch.where((counts > 0).unsqueeze(1), _normalize(sums), centers)
    assignments = (x @ centers.transpose(0, 1)).argmax(dim=1)
    return KMeansResult(centers, assignments)


@in_fp32
def kmeans_aggregate(
    queries: Tensor,
    buffer: Tensor,
    num_clusters: int,
    gamma: float,
    iterations: int = 10,
    *,
    generator: torch.Generator | None = None,
    init_indices: Tensor | None = None,
) -> Tensor:
    """Smoothed positives ``h^{s+} = γ h^+ + (1 - γ) c^+`` (IS-CSE eq. 5), ``[B, d]``.

    ``c^+`` is the centre (`spherical_kmeans` of the buffer) most cosine-similar to ``h^+``, i.e.
    the centre of "the cluster which h^+ belongs to"; ``h^+`` is normalised first (module note
    4). Gradient flows into ``queries`` only; the centres are stop-gradient. The paper's K-means
    run used 64 clusters for a 1024 buffer (Table 3).
    """
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma must be in [0, 1], got {gamma}")
    centers = spherical_kmeans(
        buffer, num_clusters, iterations, generator=generator, init_indices=init_indices
    ).centers.to(queries.dtype)
    query_n = _normalize(queries)
    nearest = (query_n.detach() @ centers.transpose(0, 1)).argmax(dim=1)
    return gamma * query_n + (1.0 - gamma) * centers[nearest]


def smoothing_loss(anchors: Tensor, smoothed_positives: Tensor, temperature: float) -> Tensor:
    """IS-CSE eq. 6: ``L_smoothing = -log e^{sim(h_i,h_i^{s+})/τ} / Σ_j e^{sim(h_i,h_j^{s+})/τ}``.

    `info_nce` with the smoothed positives (`knn_aggregate` / `kmeans_aggregate`) in place of
    ``h^+`` and the in-batch negatives only.
    """
    return info_nce(anchors, smoothed_positives, temperature)


def alpha_schedule(
    step: int,
    total_steps: int,
    kind: AlphaKind = "constant",
    alpha: float = 0.1,
    alpha_start: float = 0.005,
    alpha_end: float = 0.05,
) -> float:
    """Weight α of the smoothing loss at ``step`` (IS-CSE eq. 8 and §"Training Details").

    ``"constant"``: ``alpha`` (0.1 for the base models). ``"cosine"`` (the large models):
    ``α = min{cos(π T_i / T_max) (α_start - α_end), 0} + α_end``, 0.005 -> 0.05: α_start at step
    0, α_end from the midpoint on (module note 5). ``step`` is clamped to ``[0, total_steps]``.
    """
    if kind == "constant":
        return float(alpha)
    if kind != "cosine":
        raise ValueError(f"kind must be 'constant' or 'cosine', got {kind!r}")
    if total_steps <= 0:
        raise ValueError(f"total_steps must be > 0, got {total_steps}")
    if alpha_start > alpha_end:
        raise ValueError(
            f"eq. 8 increases α: need alpha_start <= alpha_end, got {alpha_start} > {alpha_end}"
        )
    progress = min(max(step, 0), total_steps) / total_steps
    return min(math.cos(math.pi * progress) * (alpha_start - alpha_end), 0.0) + alpha_end


# --------------------------------------------------------------------------------------------
# DCLR: noise-based negatives, non-uniformity ascent, instance weights, debiased loss
# --------------------------------------------------------------------------------------------


def noise_negatives(
    batch_size: int,
    dim: int,
    ratio: float = 1.0,
    sigma: float = 1.0,
    *,
    generator: torch.Generator | None = None,
    device: torch.device | str | None = None,
    dtype: torch.dtype | None = None,
) -> Tensor:
    """DCLR eq. 1: ``{ĥ_1, ..., ĥ_k} ~ N(0, σ²)``, ``[k, dim]`` with ``k = round(ratio × B)``.

    Shared by every sentence of the batch ("1 × batch_size noise-based negatives as the common
    negatives of all instance"); σ = 1 in the paper. ``device`` defaults to the generator's.
    """
    if batch_size < 0 or dim <= 0 or ratio < 0 or sigma < 0:
        raise ValueError(
            f"need batch_size >= 0, dim > 0, ratio >= 0, sigma >= 0; got {batch_size}, {dim}, "
            f"{ratio}, {sigma}"
        )
    count = math.floor(ratio * batch_size + 0.5)
    if device is None and generator is not None:
        device = generator.device
    noise = torch.randn(count, dim, generator=generator, device=device, dtype=dtype)
    return noise * sigma


@in_fp32
def non_uniformity_loss(
    anchors: Tensor,
    positives: Tensor,
    noise: Tensor,
    temperature: float,
    reduction: Reduction = "mean",
) -> Tensor:
    """DCLR eq. 2: ``L_U = -log e^{sim(h_i,h_i^+)/τ_u} / Σ_{ĥ_j} e^{sim(h_i,ĥ_j)/τ_u}``.

    As printed, the denominator holds the noise only (no positive, no in-batch negatives).
    """
    _check_pairs(anchors, positives)
    _check_temperature(temperature)
    if noise.dim() != 2 or noise.shape[0] == 0:
        raise ValueError(f"noise must be a non-empty [k, d], got {tuple(noise.shape)}")
    positive_logits = (_normalize(anchors) * _normalize(positives)).sum(dim=1) / temperature
    noise_logits = cosine_matrix(anchors, noise) / temperature
    return _reduce(torch.logsumexp(noise_logits, dim=1) - positive_logits, reduction)


@in_fp32
def non_uniformity_ascent(
    noise: Tensor,
    anchors: Tensor,
    *,
    steps: int,
    step_size: float,
    temperature: float,
    max_norm: float | None = None,
) -> Tensor:
    """DCLR eq. 3-4: ``t`` steps of ``ĥ_j ← Π(ĥ_j + β g(ĥ_j)/‖g(ĥ_j)‖_2)``, ``g = ∇_{ĥ_j} L_U``.

    Ascent (the noise moves to where ``L_U`` is larger, i.e. towards the anchors' directions).
    The gradient is w.r.t. the noise only: anchors are detached, and the numerator of eq. 2 does
    not depend on the noise, so ``g`` is the gradient of ``Σ_i log Σ_j e^{sim(h_i,ĥ_j)/τ_u}``
    (module note 6; its scale is irrelevant after the per-vector normalisation). Π is the
    identity, or the projection onto ``‖ĥ_j‖ ≤ max_norm``. The paper uses t = 4, β = 1e-3.
    Returns the updated noise, detached (no gradient flows into it afterwards); runs under
    `torch.enable_grad` so it also works inside `torch.no_grad`.
    """
    _check_temperature(temperature)
    if steps < 0:
        raise ValueError(f"steps must be >= 0, got {steps}")
    if noise.dim() != 2 or anchors.dim() != 2 or noise.shape[1] != anchors.shape[1]:
        raise ValueError(
            f"expected noise [k, d] and anchors [B, d], got {tuple(noise.shape)} and "
            f"{tuple(anchors.shape)}"
        )
    fixed = anchors.detach()
    current = noise.detach().clone()
    if current.shape[0] == 0:
        return current
    with torch.enable_grad():
        for _ in range(steps):
            current.requires_grad_(True)
            objective = torch.logsumexp(cosine_matrix(fixed, current) / temperature, dim=1).sum()
            (grad,) = torch.autograd.grad(objective, current)
            direction = grad / grad.norm(dim=1, keepdim=True).clamp_min(_NORM_EPS)
            current = current.detach() + step_size * direction
            if max_norm is not None:
                scale = (max_norm / current.norm(dim=1, keepdim=True).clamp_min(_NORM_EPS)).clamp(
                    max=1.0
                )
                current = current * scale
    return current.detach()


class ComplementaryWeights(NamedTuple):
    """DCLR eq. 5 weights ``[B, B]`` (1 on the diagonal) and the share of negatives zeroed."""

    weights: Tensor
    zeroed_share: Tensor


def complementary_weights(comp_sims: Tensor, phi: float) -> ComplementaryWeights:
    """DCLR eq. 5: ``α_{h^-} = 0 if sim_C(h_i, h^-) ≥ φ else 1`` for the in-batch negatives.

    ``comp_sims[i, j]`` is the frozen complementary model's (SimCSE's) cosine of sentences i and
    j (e.g. ``cosine_matrix(c, c)`` of its embeddings ``c``); φ = 0.9 in the paper. The diagonal
    (the positive) is always 1 (module note 7). ``zeroed_share`` (0-dim tensor) is the fraction of
    the ``B(B-1)`` off-diagonal negatives that got weight 0, for logging.
    """
    if comp_sims.dim() != 2 or comp_sims.shape[0] != comp_sims.shape[1]:
        raise ValueError(f"comp_sims must be [B, B], got {tuple(comp_sims.shape)}")
    sims = comp_sims.detach()
    batch = sims.shape[0]
    eye = torch.eye(batch, dtype=torch.bool, device=sims.device)
    dropped = (sims >= phi) & ~eye
    weights = (~dropped).to(sims.dtype if sims.is_floating_point() else torch.float32)
    pairs = batch * (batch - 1)
    share = dropped.sum().to(weights.dtype) / pairs if pairs else weights.new_zeros(())
    return ComplementaryWeights(weights, share)
