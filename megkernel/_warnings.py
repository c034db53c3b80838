"""Warnings attributed to the user's line, not to megkernel or scikit-learn.

Estimator methods wrapped by scikit-learn's ``_fit_context`` (and helpers
called at varying depths) cannot use a fixed ``stacklevel``: the warning
would point at ``sklearn/base.py`` or at megkernel itself. :func:`warn_user`
walks the call stack to the first frame outside megkernel, scikit-learn, joblib and
the ``contextlib`` / ``functools`` wrappers, and warns with the matching
``stacklevel`` (``skip_file_prefixes`` needs Python 3.12).

One warning per distinct problem: Python shows a warning once per text and
line of the user's code (the ``"default"`` action), but megkernel's
warnings carry each fit's figures, so a grid search of twenty fits that
meet the same problem would show twenty. :func:`warn_user` shows the first
in full and, the first time a later fit meets the same problem (the same
warning of megkernel, the same learner, the same line of the user's code),
one fixed line saying that it recurs; then nothing more. (Python's own
once-per-line memory cannot do this: any ``catch_warnings`` in between, as
scikit-learn's fits have, clears it.) Under an
``"always"`` or ``"error"`` filter (``pytest.warns``, ``catch_warnings``
that record every warning) each is shown in full.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import sys
import warnings

import numpy as np

__all__ = ["NoImprovementWarning", "limit_error", "warn_if_not_better", "warn_user"]


def _directory(path):
    return os.path.join(os.path.dirname(os.path.realpath(path)), "")


def _internal_prefixes():
    prefixes = [_directory(__file__)]  # the megkernel package (and subpackages)
    # scikit-learn, and joblib, whose Memory wraps every step a Pipeline fits
    for name in ("sklearn", "joblib"):
        module = sys.modules.get(name)
        if module is not None and getattr(module, "__file__", None):
            prefixes.append(_directory(module.__file__))
    return tuple(prefixes)


_INTERNAL_FILES = frozenset(
    os.path.realpath(module.__file__) for module in (contextlib, functools)
)


def _is_internal(filename, prefixes, cache):
    internal = cache.get(filename)
    if internal is None:
        path = os.path.realpath(filename)
        internal = path.startswith(prefixes) or path in _INTERNAL_FILES
        cache[filename] = internal
    return internal


def _user_frame(depth):
    """Return the first frame outside megkernel and its ``stacklevel``, from ``depth`` up.

    ``depth`` as for :func:`user_stacklevel`, counted from this function's
    caller. The frame is ``None`` (and the level ``2``) when every frame is
    internal.
    """
    prefixes = _internal_prefixes()
    cache = {}
    frame = sys._getframe(depth)  # the frame that will call warnings.warn
    level = 1
    while frame is not None and _is_internal(frame.f_code.co_filename, prefixes, cache):
        frame = frame.f_back
        level += 1
    return frame, (level if frame is not None else 2)


def user_stacklevel(depth=1):
    """Return the ``stacklevel`` that attributes a warning to the user's line.

    ``depth``: how many frames above this call the ``warnings.warn`` is made
    (``1``: in the function calling this one). Counts frames like
    ``warnings.warn`` up to the first one outside megkernel, scikit-learn, joblib,
    ``contextlib`` and ``functools``; when every frame is internal (e.g.
    ``python -m megkernel``) returns ``2``, the caller of the warning function.
    """
    return _user_frame(depth + 1)[1]


#: Problems warned in this process, and how often: ``(category, the text with
#: its figures masked, the warning's line in megkernel, the user's file and
#: line) -> count``.
_WARNED = {}


def _action(message, category, module, lineno):
    """Return the action of the first warnings filter that matches, as ``warnings.warn`` does."""
    for action, text, kind, where, line in warnings.filters:
        if ((text is None or text.match(message)) and issubclass(category, kind)
                and (where is None or where.match(module)) and line in (0, lineno)):
            return action
    return warnings.defaultaction


def recurring(message, problem=None):
    """Return the fixed text that stands for ``message`` when its problem recurs."""
    name = problem or (message.split(":", 1)[0] if ":" in message[:60] else "megkernel")
    return (f"{name}: the problem warned above recurs in another fit from this line "
            "(with its own figures; warnings.simplefilter('always') shows each in full).")


#: Numbers in a message: a fit's figures, which do not make another problem.
_FIGURES = re.compile(r"\d[\d.,]*(?:e[-+]?\d+)?")


def warn_user(message, category=UserWarning, *, problem=None):
    """Warn, attributed to the user's line; a recurring problem in one fixed line.

    That is ``warnings.warn`` attributed to the first frame outside
    megkernel and scikit-learn. When the same warning of megkernel was
    already shown in full for the same line of the user's code, and the
    filters would show it once anyway
    (``"default"``, ``"module"``, ``"once"``), the warning is the fixed line
    of :func:`recurring` instead, once; later recurrences are not shown.
    The same warning is the same category and text up to its figures
    (numbers), from the same line of megkernel. ``problem``: the name the
    recurring line gives (default: the message's start, before its first
    colon).
    """
    frame, level = _user_frame(1)
    if frame is not None:
        module = frame.f_globals.get("__name__", "")
        if _action(message, category, module, frame.f_lineno) in ("default", "module",
                                                                    "once"):
            site = sys._getframe(1)
            key = (category, _FIGURES.sub("#", message), site.f_code.co_filename,
                   site.f_lineno, frame.f_code.co_filename, frame.f_lineno)
            seen = _WARNED.get(key, 0)
            _WARNED[key] = seen + 1
            if seen > 1:
                return
            if seen == 1:
                message = recurring(message, problem)
    warnings.warn(message, category, stacklevel=level)


def limit_error(message, *, limit):
    """Return the ``ValueError`` of a limit, said in a warning at the user's line too.

    A fit refused for a limit inside a cross-validation (``GridSearchCV``,
    ``cross_val_score``) is caught by scikit-learn, whose "All the N fits
    failed" shows the message only at the end of its own; the
    ``UserWarning`` says it at the top, once per search (:func:`warn_user`).
    Where warnings are errors or ignored, only the ``ValueError`` (the more
    specific) is raised.

    Parameters
    ----------
    message : str
        What was asked, the limit and what to do.
    limit : str
        The limit's name (``"MAX_TRIALS"``): the problem, whatever the figures.

    Returns
    -------
    ValueError
        To raise.
    """
    frame = _user_frame(1)[0]
    module = frame.f_globals.get("__name__", "") if frame is not None else ""
    line = frame.f_lineno if frame is not None else 0
    if _action(message, UserWarning, module, line) not in ("error", "ignore"):
        warn_user(message, UserWarning, problem=f"megkernel ({limit})")
    return ValueError(message)


@contextlib.contextmanager
def deferred_warnings():
    """Collect the warnings of a block instead of showing them (see :func:`replay`)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield caught


def replay(caught):
    """Show warnings collected by :func:`deferred_warnings`, at the user's line.

    As :func:`warn_user` attributes them (the filters, a module filter
    included, see the user's frame).
    """
    for record in caught:
        warnings.warn(record.message, record.category, stacklevel=user_stacklevel(1))


class NoImprovementWarning(UserWarning):
    """A learned kernel or metric scores no better than its prior on held-out data.

    Or no better than the raw information it was given, on data it did not
    train on. The fit still returns the learned model; the warning says that
    held-out data give no evidence for it, and names both scores.

    See Also
    --------
    sklearn.exceptions.ConvergenceWarning : Warned when a fit stops early.

    Examples
    --------
    >>> import warnings
    >>> from megkernel import NoImprovementWarning
    >>> issubclass(NoImprovementWarning, UserWarning)
    True
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always", NoImprovementWarning)
    ...     warnings.warn("no gain on held-out pairs", NoImprovementWarning)
    >>> caught[0].category.__name__
    'NoImprovementWarning'
    """


def warn_if_not_better(learner, score, prior_score, *, what, higher_is_better=True,
                       best_possible=None, hint=None):
    """Warn when a learned model's held-out ``score`` is not better than its prior's.

    The warning is a :class:`NoImprovementWarning` naming both figures.

    Parameters
    ----------
    learner : str
        The learner's name, as the user wrote it.
    score, prior_score : float
        The held-out score of the learned model and of its prior.
    what : str
        What the score is, e.g. ``"R^2 of the held-out squared distances"``.
    higher_is_better : bool, default=True
    best_possible : float or None, default=None
        The score's ceiling (an AUC's 1). A tie there is no evidence against
        the learned model: the warning then says that the held-out pairs
        cannot show a gain, not that the units may be wrong.
    hint : str or None, default=None
        What to do, if the learner knows better than the default advice
        (check the units of the targets and the parameters).

    Returns
    -------
    bool
        Whether the learned model is better.
    """
    if np.isnan(score) or np.isnan(prior_score):
        # undefined scores (e.g. R^2 of held-out targets that are all equal):
        # no comparison, said once with the reason
        warn_user(
            f"{learner}: no verdict on the held-out pairs ({what}: learned {score:.4g}, "
            f"prior {prior_score:.4g}; undefined, e.g. when every held-out target is "
            "the same).", UserWarning)
        return False
    better = score > prior_score if higher_is_better else score < prior_score
    if not better and best_possible is not None and score == prior_score == best_possible:
        warn_user(
            f"{learner}: no gain can show on the held-out pairs: the prior already "
            f"scores the best possible there ({what}: {prior_score:.4g}, learned "
            f"{score:.4g}); judge the kernel on other data (e.g. k-NN on your labels).",
            NoImprovementWarning)
    elif not better:
        warn_user(
            f"{learner}: the learned kernel is no better than its prior on held-out "
            f"pairs ({what}: learned {score:.4g}, prior {prior_score:.4g}); "
            f"{hint or 'check the units of the targets and the parameters.'}",
            NoImprovementWarning)
    return better
