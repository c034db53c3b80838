"""Layer 1, spectral numerics: matrix functions, the model state, validation.

The eigh-based matrix functions, the model state (the exponent and its
eigendecomposition), array validation, the numeric limits and seeding.

Imports nothing else of megkernel.
"""
