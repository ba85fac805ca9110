"""Look inside a bundle: a text summary and a drawing (``aot-inspect``)."""

from aot.inspect.bundle_view import BundleView, load_view
from aot.inspect.draw import render_svg
from aot.inspect.html_view import render_html
from aot.inspect.summary import summarize_bundle

__all__ = ["BundleView", "load_view", "render_html", "render_svg", "summarize_bundle"]
