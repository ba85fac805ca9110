"""``aot-build``: compile a model into one .aotb bundle and say what was built."""

from __future__ import annotations

import os
import sys
import time
import traceback

import click

from aot.cli.options import tensorrt_options
from aot.compiler.build import BuildResult, build, parse_input_shapes
from aot.compiler.targets import KNOWN_TARGETS
from aot.errors import AotError, BuildError
from aot.inspect.summary import format_size
from runtime_lite.backends.tensorrt.spec import PRECISIONS
from runtime_lite.files import refuse_special_file


def _peak(n: int | None, regions: int) -> str:
    if n is None:
        return "unknown (symbolic shapes)"
    # A region's activations live in its backend (NPU memory tiers, TensorRT's own buffers), not in the host plan.
    return format_size(n) + (f" on the host, besides what the {regions} backend regions hold" if regions else "")


def summarize(result: BuildResult, source: str, output: str, size: int, seconds: float) -> list[str]:
    graph = result.graph
    meta = graph.metadata
    if "opset" in meta:
        origin = f"{meta.get('frontend', 'graph')} opset {meta['opset']}, {meta['source_nodes']} nodes"
    elif "source_nodes" in meta:
        origin = f"{meta.get('frontend', 'graph')}, {meta['source_nodes']} ATen calls"
    else:
        origin = "IR graph"
    folded = result.pass_stats.get("folded_affine", 0)
    memory = result.plan.memory
    ops = ", ".join(f"{op} {n}" for op, n in sorted(result.op_counts.items(), key=lambda kv: (-kv[1], kv[0])))
    took = f"{seconds * 1e3:.0f} ms" if seconds < 1 else f"{seconds:.2f} s"
    regions = len(result.partitioned.regions) if result.partitioned else 0
    lines = [
        f"built {output} from {source} in {took}",
        f"  model    {graph.name}: {origin} -> {sum(result.regions.values())} ops "
        f"({folded} batch-norm/scale ops folded away)",
        f"  ops      {ops}",
        "  regions  " + _regions_line(result),
        f"  plan     {len(result.plan.record['instructions'])} instructions, {memory.num_slots} slots, "
        f"{memory.inplace_count} in place, peak activations {_peak(memory.peak_bytes, regions)}",
        f"  bundle   {format_size(size)} ({len(result.plan.constants)} constants in {len(result.blobs.payloads)} blobs)",
        "  inputs   " + ", ".join(f"{v.name}: {v.type}" for v in graph.inputs),
        "  outputs  " + ", ".join(f"{v.name}: {v.type}" for v in graph.outputs),
    ]
    return lines + [f"  note: {note}" for note in result.notes]


def _regions_line(result: BuildResult) -> str:
    counts = result.regions
    regions = result.partitioned.regions if result.partitioned else []
    parts = []
    for backend, n in counts.items():
        k = sum(1 for r in regions if r.backend == backend)
        parts.append(f"{backend}: {n} ops" + (f" in {k} region{'s' if k != 1 else ''}" if k else ""))
    return ", ".join(parts)


def _check_output(model: str, output: str) -> None:
    """Before any work: the bundle must not replace the model it is built from, a device, a FIFO or a directory."""
    if os.path.exists(output) and os.path.exists(model) and os.path.samefile(model, output):
        raise BuildError(f"-o '{output}' is the input model; write the bundle to another path")
    try:
        refuse_special_file(output)
    except OSError as e:
        raise BuildError(f"cannot write bundle '{output}': {e.strerror}") from None


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("model", type=click.Path(dir_okay=False))
@click.option(
    "-o", "--output", type=click.Path(dir_okay=False), help="Bundle to write (default: MODEL's name with .aotb)."
)
@click.option(
    "--target",
    "targets",
    multiple=True,
    type=click.Choice(KNOWN_TARGETS),
    help="Backend to offload to, highest priority first; repeatable. The host always runs the rest.",
)
@click.option(
    "--input", "inputs", multiple=True, metavar="NAME:SHAPE", help="Fix an input's shape, e.g. images:1x3x224x224."
)
@click.option(
    "--min-region-size",
    type=click.IntRange(min=1),
    help="Keep regions with fewer ops than this on the host (default: each backend's own).",
)
@click.option(
    "--precision",
    type=click.Choice(PRECISIONS),
    default="fp32",
    show_default=True,
    help="TensorRT: precision written into each recipe (fp16: fp16 weights, casts at the region boundary).",
)
@click.option("--workspace", default="1GiB", show_default=True, help="TensorRT: builder workspace limit, e.g. 512MiB.")
@click.option("--batch", metavar="MIN:OPT:MAX", help="TensorRT: optimization profile for a symbolic batch dim.")
@click.option(
    "--hardware-compatible", is_flag=True, help="TensorRT: engines that run on any Ampere or newer GPU (AMPERE_PLUS)."
)
@click.option(
    "--version-compatible",
    is_flag=True,
    help="TensorRT: engines later TensorRT versions can run; they embed host code, so loading one needs an opt-in.",
)
@click.option(
    "--cache-dir",
    type=click.Path(file_okay=False),
    help="Engine cache shared with deployed runtimes (default: $AOT_CACHE_DIR, else the XDG cache dir).",
)
@click.option("--no-engines", is_flag=True, help="TensorRT: write recipes only, even where a GPU could build engines.")
@click.option("--print-graph", is_flag=True, help="Print the optimised graph, partitioned into regions.")
@click.option("-q", "--quiet", is_flag=True, help="Print nothing but errors.")
@click.option("--debug", is_flag=True, help="Show tracebacks for internal errors.")
@click.version_option(package_name="aot", prog_name="aot-build")
def main(
    model, output, targets, inputs, min_region_size, precision, workspace, batch, hardware_compatible,
    version_compatible, cache_dir, no_engines, print_graph, quiet, debug,
):  # fmt: skip
    """Compile MODEL (an ONNX file) into one runtime_lite bundle."""
    output = output or os.path.splitext(os.path.basename(model))[0] + ".aotb"
    start = time.perf_counter()

    def progress(stage: str, seconds: float) -> None:
        if not quiet:
            click.echo(f"  {stage:<9}{seconds:6.2f} s", err=True)

    try:
        _check_output(model, output)
        if precision != "fp32" and "tensorrt" not in targets:
            raise BuildError(
                f"--precision {precision} applies to TensorRT regions only; add --target tensorrt "
                "(the host and the NPU compute in fp32)"
            )
        shapes = parse_input_shapes(inputs)
        tensorrt = tensorrt_options(
            precision, workspace, batch, hardware_compatible, version_compatible, cache_dir, no_engines, quiet
        )
        result = build(
            model,
            targets=targets or ("host",),
            input_shapes=shapes,
            min_region_size=min_region_size,
            backend_options={"tensorrt": tensorrt},
            progress=progress,
        )
        size = result.save(output)
        progress("write", result.timings["write"])
    except AotError as e:
        raise click.ClickException(str(e)) from None
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        sys.exit(130)
    except Exception as e:
        if debug:
            traceback.print_exc()
        raise click.ClickException(
            f"internal compiler error: {type(e).__name__}: {e} (run with --debug for the traceback)"
        ) from None
    if print_graph and not quiet:
        click.echo(str(result.partitioned or result.graph))
    if not quiet:
        for line in summarize(result, model, output, size, time.perf_counter() - start):
            click.echo(line)
        if "tensorrt" in result.regions:
            stats = tensorrt.cache.stats
            click.echo(
                f"  engines  cache {tensorrt.cache.root}: {stats.hits} hits, {stats.misses} misses, "
                f"{stats.builds} built"
            )


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
