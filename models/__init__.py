"""aitb, the AI traffic testbed."""

__version__ = "0.1.0"
