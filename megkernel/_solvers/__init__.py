"""Layer 3, solvers: the paper's algorithms as plain functions over arrays.

MEG, DefiniteBoost and their bounds. They know nothing of scikit-learn's
estimators; they run on the engines and the numerics below.
"""
