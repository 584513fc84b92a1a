"""mlb: a reproducible, decomposable and attributable performance baseline for PyTorch."""

__version__ = "0.1.0"
TOOL_NAME = "mlb"
