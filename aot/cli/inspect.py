"""``aot-inspect``: summarise a bundle, and draw it (SVG or HTML, laid out by Graphviz) with a box per region."""

from __future__ import annotations

import os
import sys

import click

from aot.errors import AotError
from aot.inspect import load_view, render_html, render_svg, summarize_bundle
from aot.inspect.draw import dot_executable
from aot.inspect.onnx_view import to_onnx
from aot.packager.writer import atomic_write_text
from aot.words import counted
from runtime_lite.errors import BundleError
from runtime_lite.files import atomic_write, check_writable


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("bundle", type=click.Path(dir_okay=False))
@click.option(
    "--graph",
    "graph_path",
    type=click.Path(dir_okay=False),
    help="Also write the graph to this file: .svg, .html (summary + drawing), or .onnx (for Netron: "
    "every node annotated with its backend, region and composite).",
)
@click.option(
    "--collapse-regions",
    is_flag=True,
    help="In the .svg/.html drawing, draw each backend region as one box (the HTML page can also collapse "
    "regions one by one).",
)
@click.option(
    "--columns",
    type=click.IntRange(min=1),
    default=None,
    help="Fold the .svg/.html drawing into this many columns (default: as many as keep it about as wide as tall; "
    "1: one column).",
)
@click.version_option(package_name="aot", prog_name="aot-inspect")
def main(bundle: str, graph_path: str | None, collapse_regions: bool, columns: int | None) -> None:
    """Print what BUNDLE holds: signature, regions per backend with their ops, payload sizes, producer.

    The .svg and .html drawings are laid out by Graphviz's dot program (apt-get install graphviz,
    brew install graphviz or conda install graphviz); the .onnx view needs no Graphviz.
    """
    suffix = os.path.splitext(graph_path or "")[1].lower()
    if graph_path is not None and suffix not in (".svg", ".html", ".htm", ".onnx"):
        raise click.ClickException(f"--graph {graph_path!r}: the graph is written as .svg, .html or .onnx")
    if graph_path is not None:
        try:
            check_writable(graph_path)  # before the summary is printed: nothing is computed for a lost drawing
        except OSError as e:
            raise click.ClickException(f"cannot write --graph '{graph_path}': {e.strerror or e}") from None
    if suffix in (".svg", ".html", ".htm"):
        try:
            dot_executable()  # before anything is printed: say what is missing, once
        except AotError as e:
            raise click.ClickException(str(e)) from None
    try:
        view = load_view(bundle)
    except BundleError as e:
        raise click.ClickException(str(e)) from None
    except (KeyError, TypeError, IndexError) as e:
        raise click.ClickException(f"bundle '{bundle}' has a malformed plan or module summary: {e!r}") from None
    summary = summarize_bundle(view)
    click.echo(summary)
    if graph_path is not None:
        try:
            if graph_path.lower().endswith(".onnx"):
                data = to_onnx(view).SerializeToString()
                atomic_write(graph_path, lambda f: f.write(data))
            else:
                options = {"collapse_regions": collapse_regions, "columns": columns}
                text = render_svg(view, **options) if suffix == ".svg" else render_html(view, summary, **options)
                atomic_write_text(graph_path, text, "drawing")
        except AotError as e:
            raise click.ClickException(str(e)) from None
        except OSError as e:
            raise click.ClickException(f"cannot write --graph '{graph_path}': {e.strerror or e}") from None
        click.echo(f"wrote {_drawn(view, collapse_regions and suffix != '.onnx')} to {graph_path}")


def _drawn(view, collapsed: bool) -> str:
    """What the file shows: with collapsed regions, one box per region instead of its ops."""
    nodes = counted(len(view.nodes), "node")
    if not collapsed:
        return nodes
    regions = {n.region for n in view.nodes if n.region is not None}
    boxes = sum(1 for n in view.nodes if n.region is None) + len(regions)
    return f"{counted(boxes, 'box', 'boxes')} ({nodes}, {counted(len(regions), 'region')} collapsed)"


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
