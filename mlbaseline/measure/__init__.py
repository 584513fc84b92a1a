"""Measurement primitives: clocks, GPU probe, telemetry sampler, step loop.

Only this package and `envinfo` touch CUDA/NVML, always imported lazily.
"""
