"""The toy batch the maths tests share (`test_functional`, `test_sscl`, `test_iscse`,
`test_dclr`).

Most tests share one toy batch, B = 3 sentences in d = 4, built so every cosine is 0, ±1, ±0.6 or
±0.8 (rows deliberately not unit-length, to exercise the normalisation):

    anchors   a1 = (2,0,0,0)  a2 = (0,3,0,0)  a3 = (0,0,0.5,0)      -> e1, e2, e3
    positives p1 = (1,0,0,0)  p2 = (3,4,0,0)  p3 = (0,3,-4,0)      -> (1,0,0,0), (.6,.8,0,0),
                                                                        (0,.6,-.8,0)
    S = cos(a_i, p_j) = [[1, 0.6,  0  ],
                         [0, 0.8,  0.6],
                         [0, 0,   -0.8]]

With τ = 1 the SimCSE loss of row i is ``-S_ii + ln Σ_j e^{S_ij}``; the expected values are
written as that arithmetic with `math`, with the decimals in comments (e^0.6 = 1.822119,
e^0.8 = 2.225541, e^-0.8 = 0.449329, e^-1 = 0.367879, e = 2.718282).
"""

from __future__ import annotations

import math

import torch

E = math.e
exp = math.exp
log = math.log


def t(rows: list) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.float64)


def flat(x: torch.Tensor) -> list[float]:
    return x.detach().reshape(-1).tolist()


def anchors() -> torch.Tensor:
    return t([[2.0, 0, 0, 0], [0, 3.0, 0, 0], [0, 0, 0.5, 0]])


def positives() -> torch.Tensor:
    return t([[1.0, 0, 0, 0], [3.0, 4.0, 0, 0], [0, 3.0, -4.0, 0]])


# Plain SimCSE rows at τ = 1 (see above):
L1 = -1 + log(E + exp(0.6) + 1)  # -1 + ln 5.540401 = 0.712067
L2 = -0.8 + log(1 + exp(0.8) + exp(0.6))  # -0.8 + ln 5.047660 = 0.818925
L3 = 0.8 + log(1 + 1 + exp(-0.8))  # 0.8 + ln 2.449329 = 1.695814
SIMCSE = (L1 + L2 + L3) / 3  # 1.075602

# pooled intermediate-layer vectors of the 3 sentences: (3,4,0,0), e2, -e3
MID = [[3.0, 4.0, 0, 0], [0, 1.0, 0, 0], [0, 0, -1.0, 0]]
