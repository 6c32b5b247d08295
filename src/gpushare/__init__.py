"""gpushare: share a few GPUs between teams."""

__version__ = "0.1.0"
