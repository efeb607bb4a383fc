"""forklift.ml: fast linear models for tabular and sparse data behind scikit-learn's API (snapml's names)."""

from forklift.ml.cocoa import load_svmlight_part
from forklift.ml.linear import LinearRegression, LogisticRegression, SupportVectorMachine
from forklift.ml.svmlight import load_svmlight_file

__all__ = ["LinearRegression", "LogisticRegression", "SupportVectorMachine", "load_svmlight_file", "load_svmlight_part"]
