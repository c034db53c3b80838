"""Sphinx-gallery helper: save the figures that :mod:`megkernel.plotting` returns.

``plot_online_experiment`` and ``plot_batch_experiment`` return a
:class:`matplotlib.figure.Figure` made without pyplot (so that the command
line never opens a window), which sphinx-gallery's matplotlib scraper, which
reads pyplot's figure list, does not see. This scraper saves every such
figure that an example's code block left in its namespace, once. It runs
before the matplotlib scraper, while pyplot's figures still have their
managers, and marks those as seen too (a closed pyplot figure loses its
manager, and would otherwise be saved again by a later block).
"""

from pathlib import PurePosixPath

from matplotlib.figure import Figure
from sphinx_gallery.scrapers import figure_rst


def figure_scraper(block, block_vars, gallery_conf, **kwargs):
    """Save the pyplot-less Figures of a code block; return their reST."""
    paths = []
    for value in list(block_vars["example_globals"].values()):
        if not isinstance(value, Figure) or getattr(value, "_gallery_saved", False):
            continue
        value._gallery_saved = True
        if value.canvas.manager is not None:
            continue  # a pyplot figure: the matplotlib scraper (after this one) saves it
        path = PurePosixPath(block_vars["image_path_iterator"].next())
        value.savefig(path)
        paths.append(path)
    return "".join(figure_rst([path], gallery_conf["src_dir"]) for path in paths)
