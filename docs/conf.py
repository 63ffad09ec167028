"""Sphinx configuration of the jupyter-agents documentation (MyST + PyData theme).

Build: ``sphinx-build -W --keep-going -b html docs docs/_build/html`` (``.ci/run`` does,
with warnings as errors). The configuration, REST and CLI references are generated at
build time from the code: ``_ext/configref.py`` walks the traits,
``sphinxcontrib.openapi`` renders ``jupyter_agents/rest-api.yml``, ``sphinxarg`` reads the
CLI's parser, and ``_ext/clicommands.py`` lists its commands on the CLI page.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "_ext"))

project = "jupyter-agents"
author = "jupyter-agents contributors"
copyright = "jupyter-agents contributors"

extensions = [
    "myst_parser",
    "sphinxcontrib.openapi",
    "sphinxarg.ext",
    "configref",
    "clicommands",
]

source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = ["_build"]
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3

html_theme = "pydata_sphinx_theme"
html_title = "jupyter-agents"
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
    "secondary_sidebar_items": ["page-toc"],
    "footer_start": ["copyright"],
    "footer_end": [],
}
html_sidebars = {"**": ["sidebar-nav-bs"]}

# sphinxcontrib-openapi: the renderer that lists request and response fields
openapi_default_renderer = "httpdomain"
smartquotes = False  # "--state-dir" stays two hyphens
