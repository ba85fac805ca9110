"""``aot-inspect``: summarise a bundle, and draw it (SVG or HTML) with regions coloured by backend."""

from __future__ import annotations

import os
import sys

import click

from aot.errors import AotError
from aot.inspect import load_view, render_html, render_svg, summarize_bundle
from aot.inspect.onnx_view import to_onnx
from aot.packager.writer import atomic_write_text
from runtime_lite.errors import BundleError
from runtime_lite.files import atomic_write


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("bundle", type=click.Path(dir_okay=False))
@click.option(
    "--graph",
    "graph_path",
    type=click.Path(dir_okay=False),
    help="Also write the graph to this file: .svg, .html (summary + drawing), or .onnx (for Netron: "
    "every node annotated with its backend, region and composite).",
)
@click.version_option(package_name="aot", prog_name="aot-inspect")
def main(bundle: str, graph_path: str | None) -> None:
    """Print what BUNDLE holds: signature, regions per backend with their ops, payload sizes, producer."""
    if graph_path is not None and os.path.splitext(graph_path)[1].lower() not in (".svg", ".html", ".htm", ".onnx"):
        raise click.ClickException(f"--graph {graph_path!r}: the graph is written as .svg, .html or .onnx")
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
                text = render_svg(view) if graph_path.lower().endswith(".svg") else render_html(view, summary)
                atomic_write_text(graph_path, text, "drawing")
        except AotError as e:
            raise click.ClickException(str(e)) from None
        except OSError as e:
            raise click.ClickException(f"cannot write --graph '{graph_path}': {e.strerror or e}") from None
        click.echo(f"wrote {len(view.nodes)} nodes to {graph_path}")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
