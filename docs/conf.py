"""Sphinx configuration of megkernel's documentation (``pip install ".[docs]"``)."""

import os
import re
import sys
import warnings
from datetime import date

import megkernel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # _gallery.py

project = "megkernel"
author = "The megkernel developers"
copyright = f"{date.today().year}, {author}"
release = megkernel.__version__
version = ".".join(release.split(".")[:2])

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
    "sphinx.ext.doctest",
    "numpydoc",
    "sphinx_gallery.gen_gallery",
]

templates_path = ["_templates"]
exclude_patterns = ["_build", "examples", "Thumbs.db", ".DS_Store"]
default_role = "literal"

autosummary_generate = True
autodoc_default_options = {"members": True, "inherited-members": False}
autodoc_typehints = "none"

numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_attributes_as_param_list = True

html_theme = "alabaster"
html_static_path = []
html_title = f"megkernel {release}"
html_theme_options = {
    "description": "Kernel learning by Matrix Exponentiated Gradient updates and DefiniteBoost",
    "fixed_sidebar": True,
    "page_width": "1100px",
    "sidebar_width": "230px",
}
html_sidebars = {"**": ["about.html", "navigation.html", "searchbox.html"]}

# the gallery runs every example at build time, one figure each
sphinx_gallery_conf = {
    "examples_dirs": "examples",
    "gallery_dirs": "auto_examples",
    "filename_pattern": r"/plot_",
    "download_all_examples": False,
    "remove_config_comments": True,
    "matplotlib_animations": False,
    "image_scrapers": ("_gallery.figure_scraper", "matplotlib"),
    "reset_modules": ("matplotlib",),
    "within_subsection_order": "FileNameSortKey",
    "show_memory": False,
    "plot_gallery": "True",
    "doc_module": ("megkernel",),
    "backreferences_dir": "generated/backreferences",
}


def _skip_member(app, what, name, obj, skip, options):
    """Leave out scikit-learn's generated ``set_*_request`` methods (metadata routing)."""
    if name.startswith("set_") and name.endswith("_request"):
        return True
    return None


#: A numpydoc parameter line, ``name : type``.
_PARAMETER_LINE = re.compile(r"^(\s*\*{0,2}\w+(?:, \*{0,2}\w+)* : )(.*)$")
#: A name ending in ``_`` inside a type, e.g. ``(n_iter_ + 1,)``: reST reads it as a link.
_TRAILING_UNDERSCORE = re.compile(r"\b([A-Za-z]\w*?)_(?=[\s,)\]]|$)")


def _escape_types(app, what, name, obj, options, lines):
    """Escape fitted-attribute names in numpydoc types (``ndarray of shape (n_iter_,)``).

    scikit-learn's convention names a fitted attribute in a shape; reStructuredText
    reads ``n_iter_`` as a hyperlink reference. Runs before numpydoc (priority 400).
    """
    for i, line in enumerate(lines):
        match = _PARAMETER_LINE.match(line)
        if match:
            lines[i] = match.group(1) + _TRAILING_UNDERSCORE.sub(r"\1\\_", match.group(2))


def setup(app):
    app.connect("autodoc-skip-member", _skip_member)
    app.connect("autodoc-process-docstring", _escape_types, priority=400)


# examples draw off-screen; progress bars stay quiet in the build log
os.environ.setdefault("MPLBACKEND", "Agg")
warnings.filterwarnings("ignore", message="Matplotlib is currently using agg")
