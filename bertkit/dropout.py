"""Moved to :mod:`bertkit.kernels.dropout`; these names stay importable from here."""

from bertkit.kernels.dropout import Dropout, dropout

__all__ = ["Dropout", "dropout"]
