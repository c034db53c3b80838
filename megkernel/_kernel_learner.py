"""The protocol through which :class:`~megkernel.KernelDistances` asks a learner for a kernel.

(Placeholder: filled in by the learner-protocol work.)
"""

from __future__ import annotations

__all__ = ["KernelLearnerMixin", "MEGKernelLearnerMixin"]


class KernelLearnerMixin:
    """Learn a kernel over object ids from a validated pair table."""


class MEGKernelLearnerMixin(KernelLearnerMixin):
    """The protocol for :class:`~megkernel.MEGKernelRegressor` (streams fix its scale)."""
