"""Anderson extrapolation of coordinate-descent epochs (Bertrand & Massias, 2021).

Coordinate descent crawls along directions where features are nearly collinear: each epoch shrinks the error
there by a factor close to 1. Those slow directions are few, so a combination of the last few iterates, with
weights that cancel the last few steps' differences, lands close to the optimum. The solver keeps the
extrapolated point only if it lowers the objective, so the extrapolation can never make a fit worse.
"""

from __future__ import annotations

import numpy as np


class Extrapolation:
    """The last ``memory + 1`` iterates (each a tuple of arrays that move together, such as ``w`` and ``Xw``)."""

    def __init__(self, *, memory: int = 5) -> None:
        self.memory = memory
        self.iterates: list[tuple[np.ndarray, ...]] = []

    def push(self, *arrays: np.ndarray) -> None:
        """Remember an iterate; the oldest is forgotten once ``memory + 1`` are kept."""
        self.iterates.append(tuple(a.copy() for a in arrays))
        del self.iterates[: -(self.memory + 1)]

    def propose(self) -> tuple[np.ndarray, ...] | None:
        """The extrapolated iterate once ``memory + 1`` are kept (then forgotten), else ``None``."""
        if len(self.iterates) <= self.memory:
            return None
        first = np.stack([it[0] for it in self.iterates])
        differences = np.diff(first, axis=0)
        gram = differences @ differences.T
        gram += 1e-12 * max(np.trace(gram), 1e-300) * np.eye(len(gram))
        try:
            c = np.linalg.solve(gram, np.ones(len(gram)))
        except np.linalg.LinAlgError:
            self.iterates.clear()
            return None
        c /= c.sum()
        proposal = tuple(
            sum((ck * it[k] for ck, it in zip(c, self.iterates[1:], strict=True)), np.zeros_like(self.iterates[0][k]))
            for k in range(len(self.iterates[0]))
        )
        self.iterates.clear()
        return proposal
