"""Sphinx-gallery helper: save the figures that :mod:`megkernel.plotting` returns.

``plot_online_experiment`` and ``plot_batch_experiment`` return a
:class:`matplotlib.figure.Figure` made without pyplot (so that the command
line never opens a window), which sphinx-gallery's matplotlib scraper, which
reads pyplot's figure list, does not see. This scraper saves every such
figure that an example's code block left in its namespace, once.
"""

from pathlib import PurePosixPath

from matplotlib.figure import Figure
from sphinx_gallery.scrapers import figure_rst


def figure_scraper(block, block_vars, gallery_conf, **kwargs):
    """Save the pyplot-less Figures of a code block; return their reST."""
    paths = []
    for value in list(block_vars["example_globals"].values()):
        if (isinstance(value, Figure) and value.canvas.manager is None
                and not getattr(value, "_gallery_saved", False)):
            value._gallery_saved = True
            path = PurePosixPath(block_vars["image_path_iterator"].next())
            value.savefig(path)
            paths.append(path)
    return "".join(figure_rst([path], gallery_conf["src_dir"]) for path in paths)
