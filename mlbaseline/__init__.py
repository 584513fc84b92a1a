"""mlb: a performance baseline for PyTorch projects that is reproducible, decomposable and attributable."""

__version__ = "0.1.0"
TOOL_NAME = "mlb"
