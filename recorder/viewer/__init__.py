"""forge_record.viewer: one recorded session as something to look at.

    build_view(session, exchanges, summary) -> View   model.py: pure, the shared view model
    render_html(view) -> str                           html.py: one self-contained page

The model decides what is shown (threads, each call's new messages, folds, fingerprints);
renderers decide only how.
"""

from forge_record.viewer.html import render_html
from forge_record.viewer.model import View, build_view

__all__ = ["View", "build_view", "render_html"]
