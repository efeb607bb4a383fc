"""A category one-hot (adjacent 0/1 columns with exactly one 1 in every row) handed to XGBoost as one categorical
feature, and the trees' splits read back onto the columns.

Why: XGBoost builds a histogram of every column for every row. The adult census is 6 numbers and 8 categories
one-hot in 102 columns; as 14 features, of which 8 categorical split one category against the rest (XGBoost's
one-hot splits), the trees can split exactly where they could on the columns, for a fraction of the work. A split
"category k, or not" is the split "column k at 1" on the columns, so the trees are read back as trees over the
columns, and the model, its graph and its importances never see the bundles.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

MIN_COLUMNS = 2  # a one-hot of fewer columns is not a bundle worth making
CHUNK_ROWS = 65_536  # rows checked at a time: the copy made is of these rows' candidate columns


@dataclass(frozen=True, eq=False)
class ColumnBundles:
    """XGBoost's features, in the columns' order: a column as it is (a number), or in place of a group of
    ``groups`` one categorical feature whose category ``i`` is the group's ``i``-th column being 1. (In the
    columns' order, XGBoost breaks a tie between two splits of equal gain as it does on the columns: for the lower
    column.)"""

    width: int  # the columns of the data
    groups: tuple[np.ndarray, ...]  # int64 each: a one-hot's adjacent columns, in order

    @classmethod
    def of(cls, X: np.ndarray) -> ColumnBundles | None:
        """``X``'s runs of adjacent columns that are a one-hot, or None when it has none."""
        rows, width = X.shape
        if rows == 0:
            return None
        candidates = np.flatnonzero((X[0] == 0) | (X[0] == 1))  # the first row rules out most number columns
        binary = np.ones(len(candidates), dtype=bool)
        ones_at = np.empty((len(candidates), rows), dtype=bool)  # a candidate's rows side by side: is it 1 there
        for start in range(0, rows, CHUNK_ROWS):  # a block of rows copied at a time, not the columns of all of X
            values = np.take(X[start : start + CHUNK_ROWS], candidates, axis=1)
            binary &= ((values == 0) | (values == 1)).all(axis=0)
            ones_at[:, start : start + CHUNK_ROWS] = (values == 1).T
        bits = ones_at[binary].view(np.int8)
        groups: list[np.ndarray] = []
        run: list[int] = []
        ones = np.zeros(rows, dtype=np.int8)  # whether one of the run's columns is 1, row by row
        for bit, column in zip(bits, candidates[binary].tolist(), strict=True):
            if run and (column != run[-1] + 1 or (ones & bit).any()):
                run, ones = [], np.zeros(rows, dtype=np.int8)
            run.append(column)
            ones |= bit
            if ones.all():
                if len(run) >= MIN_COLUMNS:
                    groups.append(np.array(run, dtype=np.int64))
                run, ones = [], np.zeros(rows, dtype=np.int8)
        return cls(width=width, groups=tuple(groups)) if groups else None

    def keeping_to(self, X: np.ndarray) -> ColumnBundles | None:
        """These bundles less the groups that ``X`` (other rows: a validation set) does not keep to, or None when
        none is left."""

        def kept_to(group: np.ndarray) -> bool:
            block = X[:, group[0] : group[-1] + 1]  # adjacent columns: a view
            return bool(((block == 0) | (block == 1)).all() and (block.sum(axis=1) == 1).all())

        kept = [group for group in self.groups if kept_to(group)]
        return ColumnBundles(width=self.width, groups=tuple(kept)) if kept else None

    @cached_property
    def features(self) -> tuple[np.ndarray, ...]:
        """Each XGBoost feature's columns: one (a number) or a group's (a category)."""
        first = {int(group[0]): group for group in self.groups}
        features: list[np.ndarray] = []
        column = 0
        while column < self.width:
            group = first.get(column)
            features.append(np.array([column], dtype=np.int64) if group is None else group)
            column += 1 if group is None else len(group)
        return tuple(features)

    @property
    def feature_types(self) -> list[str]:
        """XGBoost's type of each feature: ``q`` (a number) or ``c`` (a category)."""
        return ["c" if len(columns) > 1 else "q" for columns in self.features]

    @property
    def parameters(self) -> dict[str, int]:
        """XGBoost's parameters for growing on these features: every categorical split a one-hot split."""
        return {"max_cat_to_onehot": max(len(g) for g in self.groups) + 1}

    def apply(self, X: np.ndarray) -> np.ndarray:
        """``X`` (whose rows keep to the groups) as XGBoost's features: a group's feature holds the index of its
        1."""
        out = np.empty((X.shape[0], len(self.features)), dtype=X.dtype)
        numbers = [index for index, columns in enumerate(self.features) if len(columns) == 1]
        out[:, numbers] = np.take(X, [int(self.features[index][0]) for index in numbers], axis=1)
        for index, columns in enumerate(self.features):
            if len(columns) > 1:  # adjacent columns: a view
                out[:, index] = X[:, columns[0] : columns[-1] + 1] @ np.arange(len(columns), dtype=X.dtype)
        return out

    def column(self, feature: int, category: int | None) -> int:
        """The data's column that XGBoost's ``feature`` (and, for a categorical one, its ``category``) is."""
        return int(self.features[feature][0 if category is None else category])
