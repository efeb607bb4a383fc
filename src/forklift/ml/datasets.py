"""Generated data sets the tests and benchmarks share: a dense table and Criteo-like sparse click logs."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from sklearn.datasets import make_classification


def make_dense_classification(
    *, n_samples: int = 200_000, n_features: int = 100, random_state: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's ``make_classification`` (two informative, two redundant features): labels 0/1."""
    X, y = make_classification(n_samples=n_samples, n_features=n_features, random_state=random_state)
    return X, y


def make_sparse_clicks(
    *,
    n_samples: int = 1_000_000,
    n_features: int = 10_000,
    n_fields: int = 10,
    zipf_exponent: float = 1.1,
    random_state: int = 0,
) -> tuple[sp.csr_matrix, np.ndarray]:
    """Click logs as Criteo's look after one-hot encoding: each row one category from each of ``n_fields``.

    A field's categories are drawn with Zipf popularity (a few are everywhere, most are rare); the label is
    drawn from a logistic model with random true weights, so a linear model is the right one. Returns a
    float32 CSR matrix (sorted indices, exactly ``n_fields`` ones a row) and 0/1 labels.
    """
    rng = np.random.default_rng(random_state)
    per_field = n_features // n_fields
    ranks = np.arange(1, per_field + 1, dtype=np.float64)
    popularity = ranks**-zipf_exponent
    popularity /= popularity.sum()
    columns = np.empty((n_samples, n_fields), dtype=np.int32)
    for field in range(n_fields):
        columns[:, field] = field * per_field + rng.choice(per_field, size=n_samples, p=popularity)
    true_weights = rng.normal(scale=0.7, size=n_fields * per_field)
    margins = true_weights[columns].sum(axis=1) - 0.5
    labels = (rng.random(n_samples) < 1.0 / (1.0 + np.exp(-margins))).astype(np.int64)
    indptr = np.arange(0, n_samples * n_fields + 1, n_fields, dtype=np.int64)
    data = np.ones(n_samples * n_fields, dtype=np.float32)
    X = sp.csr_matrix((data, columns.ravel(), indptr), shape=(n_samples, n_features))
    return X, labels
