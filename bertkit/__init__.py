"""bertkit: a complete BERT system on PyTorch."""
__version__ = "0.1.0"
