"""IS-CSE: instance-smoothed contrastive learning (He et al., AAAI 2023), eq. 3-8.

A FIFO buffer holds the last L normalised, stop-gradient positives (eq. 3). Each positive
``h^+`` is smoothed with its k nearest buffer rows by self-attention with temperature β (eq. 4),
or mixed with its K-means centre (eq. 5); the smoothing loss (eq. 6) is added with weight α
(eq. 7), constant or on the cosine schedule of eq. 8. The buffer is a module buffer, so it is
checkpointed and resumed with the model.

Ambiguities resolved (and how)
------------------------------
1. IS-CSE eq. 4: the query is part of the aggregation ("K = {h^+, h^r_1, ..., h^r_k}"), every row
   is L2-normalised ("we normalize and then concatenate them"), the scores are divided by β ("a
   larger β will make the attention weights more even"; released code ``/2.`` with β = 2), the
   retrieved rows are stop-gradient and ``h^+`` is not ("h^+ is not a stop-gradient embedding but
   the retrieved embeddings h^r and centers c^+ are"). The released code enqueues the current batch
   *before* retrieving and then drops the best hit (the query's own copy): `knn_indices` takes
   ``skip_top`` (0 = the paper's reading, 1 = the code's).
2. IS-CSE eq. 5: "we directly retrieve the center embedding to which h^+ belongs": the buffer is
   clustered by spherical (cosine) K-means with renormalised centres and a fixed number of
   iterations from a seeded initialisation, ``h^+`` belongs to its most similar centre, and ``h^+``
   is normalised before the mix (as in eq. 4) so that γ mixes two unit vectors.
3. IS-CSE eq. 8: ``α = min{cos(π T_i/T_max)(α_start - α_end), 0} + α_end`` with α_start = 0.005,
   α_end = 0.05 ("a cosine schedule ... from 0.005 to 0.05", "gradually increase"). Read literally
   (and as in the released `cosineSchedule`, ``if alpha >= end: return end``) α rises from α_start
   at step 0 to α_end at *mid*-training and stays there; `alpha_schedule` implements exactly that
   and rejects α_start > α_end, for which the ``min`` makes the formula meaningless.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Literal, NamedTuple

import torch
from torch import Tensor

from sentemb.config import Count, NonNegative, Probability, Range
from sentemb.losses import OneMethodLoss
from sentemb.methods.base import Method, MethodConfig, Objective, TrainState, Views
from sentemb.methods.functional import (
    check_temperature,
    cosine_matrix,
    in_fp32,
    info_nce,
    normalize,
)
from sentemb.registry import register_method

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

AlphaKind = Literal["constant", "cosine"]


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
    incoming = normalize(embeddings.detach()).to(buffer.dtype)
    if incoming.shape[0] >= length:
        return incoming[incoming.shape[0] - length :]
    return torch.cat([buffer.detach()[incoming.shape[0] :], incoming], dim=0)


def knn_indices(queries: Tensor, buffer: Tensor, k: int, skip_top: int = 0) -> Tensor:
    """Indices ``[B, k]`` of each query's k most cosine-similar buffer rows, best first.

    IS-CSE §"Retrieving Sentence Embeddings", kNN: "we calculate the cosine similarity (Equ. 2)
    between h^+ and each of the embedding in buffer B. Then k nearest embeddings are retrieved".
    ``skip_top`` drops that many best hits first (1 when the buffer already holds the current
    batch, as in the released code; module note 1).
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
    check_temperature(beta)
    if queries.dim() != 2 or buffer.dim() != 2 or queries.shape[1] != buffer.shape[1]:
        raise ValueError(
            f"expected queries [B, d] and buffer [L, d], got {tuple(queries.shape)} and "
            f"{tuple(buffer.shape)}"
        )
    buffer = buffer.detach().to(queries.dtype)
    query_n = normalize(queries)
    index = knn_indices(queries, buffer, k, skip_top)
    retrieved = normalize(buffer)[index]  # [B, k, d], stop-gradient
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
    x = normalize(points.detach())
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
        ones = torch.ones_like(assignments, dtype=x.dtype)  # not bincount: it reads the device
        counts = torch.zeros(num_clusters, dtype=x.dtype, device=x.device).index_add_(
            0, assignments, ones
        )
        centers = torch.where((counts > 0).unsqueeze(1), normalize(sums), centers)
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
    query_n = normalize(queries)
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
    0, α_end from the midpoint on (module note 3). ``step`` is clamped to ``[0, total_steps]``.
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


# eq. 4 weighs the k neighbours by softmax(cos / β): near one-hot on the nearest at β = 0.001
ONE_HOT = "cos / beta past 1000 weighs the nearest neighbour alone; smaller only overflows"


@dataclass
class ISCSEConfig(MethodConfig):
    """Params section `iscse` (the paper's defaults for base models)."""

    buffer_size: Count = 1024
    k: Count = 16
    beta: Annotated[float, Range(1e-3, why=ONE_HOT)] = 2.0  # eq. 4's temperature
    retrieval: Literal["knn", "kmeans"] = "knn"
    clusters: Count = 64
    gamma: Probability = 0.5
    kmeans_iterations: Count = 10
    alpha_schedule: Literal["constant", "cosine"] = "constant"
    alpha: NonNegative = 0.1
    alpha_start: NonNegative = 0.005
    alpha_end: NonNegative = 0.05

    def validate(self) -> list[str]:
        problems = []
        if self.k > self.buffer_size:
            problems.append(f"k: must be in [1, buffer_size={self.buffer_size}], got {self.k}")
        if self.retrieval == "kmeans" and self.clusters > self.buffer_size:
            problems.append(f"clusters: must be in [1, buffer_size], got {self.clusters}")
        if not self.alpha_start <= self.alpha_end:
            problems.append(
                f"alpha_end: must be >= alpha_start ({self.alpha_start}), got {self.alpha_end}"
            )
        return problems


@register_method("iscse", config=ISCSEConfig)
class ISCSE(Method):
    """Adds ``α L_smoothing`` once the buffer holds enough rows (k, or `clusters` for K-means)."""

    def __init__(self, config: ISCSEConfig, model: SentenceTransformer) -> None:
        super().__init__(config, model)
        dim = model.get_embedding_dimension()
        self.register_buffer("buffer", torch.zeros(config.buffer_size, dim))
        self.filled = 0  # rows of the buffer holding embeddings (a number: no device read)

    def get_extra_state(self) -> dict[str, Any]:
        return {"filled": self.filled}

    def set_extra_state(self, state: dict[str, Any]) -> None:
        self.filled = int(state["filled"])

    def unstable_params(self) -> tuple[str, ...]:
        """β and the scale of α L_smoothing this run uses: `alpha`, or eq. 8's two ends."""
        cosine = self.config.alpha_schedule == "cosine"
        return ("beta", *(("alpha_start", "alpha_end") if cosine else ("alpha",)))

    def contribute(self, objective: Objective, views: Views, state: TrainState) -> None:
        config, filled = self.config, self.filled
        needed = config.k if config.retrieval == "knn" else config.clusters
        if filled < needed:
            return
        memory = self.buffer[self.buffer.shape[0] - filled :]
        positives = objective.positives
        if config.retrieval == "knn":
            smoothed = knn_aggregate(positives, memory, config.k, config.beta)
        else:
            smoothed = kmeans_aggregate(
                positives,
                memory,
                config.clusters,
                config.gamma,
                config.kmeans_iterations,
                generator=state.generator,
            )
        loss = smoothing_loss(objective.anchors, smoothed, objective.temperature)
        if config.alpha_schedule == "cosine" and state.total_steps is None:
            raise ValueError(
                "iscse.alpha_schedule: cosine needs the run's length: pass total_steps to the loss"
            )
        alpha = alpha_schedule(
            state.step,
            state.total_steps or 1,
            config.alpha_schedule,
            config.alpha,
            config.alpha_start,
            config.alpha_end,
        )
        objective.terms["iscse/weighted_smoothing"] = alpha * loss
        objective.logs["iscse/smoothing_loss"] = loss.detach()
        objective.logs["iscse/alpha"] = alpha

    def after_step(self, views: Views) -> None:
        self.buffer.copy_(fifo_enqueue(self.buffer, views.positives))
        self.filled = min(self.filled + views.positives.shape[0], self.buffer.shape[0])


class ISCSELoss(OneMethodLoss[ISCSEConfig]):
    """IS-CSE (He et al., AAAI 2023) as a sentence-transformers loss.

    Eq. 3-8: SimCSE's InfoNCE plus ``α L_smoothing`` (eq. 6), the positives smoothed with their
    k nearest rows of a FIFO buffer of past positives (eq. 4) or their K-means centre (eq. 5).

    Example::

        from sentence_transformers import SentenceTransformer, SentenceTransformerTrainer
        from sentemb.methods.iscse import ISCSEConfig, ISCSELoss

        model = SentenceTransformer("bert-base-uncased")
        loss = ISCSELoss(model, ISCSEConfig(k=16, alpha=0.1))
        SentenceTransformerTrainer(model=model, train_dataset=sentences, loss=loss).train()
    """

    method = "iscse"
