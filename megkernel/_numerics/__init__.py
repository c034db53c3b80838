"""Layer 1, spectral numerics: the eigh-based matrix functions, the model
state (the exponent and its eigendecomposition) and array validation.

Imports nothing else of megkernel.
"""
