"""``aot-build``: compile a model into one .aotb bundle and say what was built."""

from __future__ import annotations

import math
import os
import stat
import sys
import time
import traceback

import click

from aot.compiler.backends import CompilerBackend, available_compiler_backends, get_compiler_backend
from aot.compiler.build import BuildResult, build, parse_input_shapes
from aot.compiler.quantize import METHODS, QuantizeConfig
from aot.compiler.quantize.config import budget_fraction
from aot.errors import AotError, BuildError
from aot.frontend.onnx.control_flow import MAX_BOUND_VALUES
from aot.inspect.summary import describe_dims, describe_worst_case, format_size
from aot.ir.dims import DimRange
from aot.quiet import show_third_party_warnings
from aot.words import counted
from runtime_lite import format as fmt
from runtime_lite.backends.options import Option, split_assignments
from runtime_lite.errors import OptionError
from runtime_lite.files import check_writable


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
        f"  plan     {counted(len(result.plan.record['instructions']), 'instruction')}, {counted(memory.num_slots, 'slot')}, "
        f"{memory.inplace_count} in place, peak activations {_peak(memory.peak_bytes, regions)}",
        f"  bundle   {format_size(size)} ({counted(len(result.plan.constants), 'constant')} in "
        f"{counted(len(result.blobs.payloads), 'blob')})",
        "  inputs   " + (", ".join(f"{v.name}: {v.type}" for v in graph.inputs) or "none"),
        *(
            [f"  bound    {meta['bound_inputs']} (constants at build time, no longer inputs)"]
            if meta.get("bound_inputs")
            else []
        ),
        "  outputs  " + ", ".join(f"{v.name}: {v.type}" for v in graph.outputs),
        *(f"  dim      {line}" for line in describe_dims(result.header["signature"].get("dims", {}))),
        *(f"  worst    {line}" for line in describe_worst_case(result.header["signature"])),
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


def calibration_table_path(bundle: str) -> str:
    """Where the calibration table is kept: beside the bundle, ``model.aotb`` -> ``model.calibration.json``."""
    return os.path.splitext(bundle)[0] + ".calibration.json"


def parse_budget(text: str | None) -> float | None:
    """``--accuracy-budget``: ``1%`` or ``0.01`` -> 0.01; anything else is a one-line error."""
    return budget_fraction(text, "--accuracy-budget")


def _check_output(model: str, output: str) -> None:
    """Before any work: the bundle must not replace the model it is built from, a device, a FIFO or a directory."""
    if os.path.exists(output) and os.path.exists(model) and os.path.samefile(model, output):
        raise BuildError(f"-o '{output}' is the input model; write the bundle to another path")
    try:
        check_writable(output)
    except OSError as e:
        raise BuildError(f"cannot write bundle '{output}': {e.strerror}") from None


def _check_model(model: str) -> None:
    """Before any work: MODEL must be a non-empty regular file, learnt from stat alone (opening a FIFO blocks)."""
    try:
        info = os.stat(model)
    except OSError:  # missing or unreachable: the frontend says which
        return
    if not stat.S_ISREG(info.st_mode):
        raise BuildError(
            f"model '{model}' is not a regular file (a FIFO, device or socket); give an .onnx or .pt2 file"
        )
    if info.st_size == 0:
        raise BuildError(f"model file '{model}' is empty")


def input_shapes(specs: tuple[str, ...]) -> dict[str, tuple]:
    """``--input NAME:SHAPE`` options as ``build(input_shapes=...)``, each dim within what a bundle can hold.

    A dim past the bundle format's element limit could never run, and an integer past
    int64 would surface far from its cause, as an overflow inside some op's shape.
    """
    shapes: dict[str, tuple] = {}
    for spec in specs:
        one = parse_input_shapes([spec])
        for name, shape in one.items():
            if name in shapes:  # the last would silently win: the user meant one of them
                raise BuildError(f"--input {spec!r}: input {name!r} was given a shape already")
            _check_input_dims(spec, shape)
        shapes.update(one)
    return shapes


def _check_input_dims(spec: str, shape: tuple) -> None:
    """BuildError naming the --input value when its rank, a dim, a bound or its fixed extent is out of range."""
    if len(shape) > fmt.MAX_RANK:
        raise BuildError(f"--input {spec!r}: {len(shape)} dims, more than a bundle holds ({fmt.MAX_RANK})")
    for dim in shape:
        size = dim.max if isinstance(dim, DimRange) else dim
        if isinstance(size, int) and size > fmt.MAX_ELEMENTS:
            raise BuildError(
                f"--input {spec!r}: dim {size} is larger than a tensor may be ({fmt.MAX_ELEMENTS} elements)"
            )
    extent = math.prod(d for d in shape if isinstance(d, int))
    if extent > fmt.MAX_ELEMENTS:
        raise BuildError(f"--input {spec!r}: {extent} elements, more than a tensor may hold ({fmt.MAX_ELEMENTS})")


def bound_values(specs: tuple[str, ...]) -> dict[str, object]:
    """``--bind NAME=VALUE`` options as ``build(input_values=...)``: a number, true/false, or a short list
    (``1,2,3`` or ``[1,2,3]``); the build converts each to its input's dtype and checks its shape."""
    values: dict[str, object] = {}
    for spec in specs:
        name, sep, text = spec.rpartition("=")
        if not sep or not name or not text.strip():
            raise BuildError(f"--bind must look like NAME=VALUE (sr=16000, or a list: ids=1,2,3), got {spec!r}")
        if name in values:
            raise BuildError(f"--bind {spec!r}: input {name!r} was given a value already")
        text = text.strip()
        listed = text.startswith("[") or "," in text
        inner = text[1:-1] if text.startswith("[") and text.endswith("]") else text
        parts = inner.split(",") if listed else [text]
        if listed and len(parts) > MAX_BOUND_VALUES:
            raise BuildError(f"--bind {spec!r}: {len(parts)} values, more than --bind takes ({MAX_BOUND_VALUES})")
        try:
            numbers = [] if listed and not inner.strip() else [_number(p) for p in parts]
        except ValueError:
            raise BuildError(f"--bind {spec!r}: {text!r} is not a number, true/false, or a list of them") from None
        values[name] = numbers if listed else numbers[0]
    return values


def _number(text: str) -> int | float | bool:
    text = text.strip()
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    try:
        return int(text)
    except ValueError:
        return float(text)  # "0.5", "1e-3", "inf", "nan"; anything else raises ValueError


def _installed_backends() -> list[CompilerBackend]:
    """The backends this aot can target; a plugin that fails to load is left out here and named when targeted."""
    backends = []
    for name in available_compiler_backends():
        try:
            backends.append(get_compiler_backend(name))
        except BuildError:
            pass
    return backends


def _aliases() -> dict[str, list[tuple[str, Option]]]:
    """Each backend option's command-line alias (``--precision``) -> the (backend, option) pairs it sets.

    Several backends may share an alias (npu and tensorrt both take ``--precision``):
    the value goes to each of them that is a target of the build.
    """
    aliases: dict[str, list[tuple[str, Option]]] = {}
    for backend in _installed_backends():
        for option in backend.options:
            if option.flag:
                aliases.setdefault(option.flag, []).append((backend.name, option))
    return aliases


class _BuildCommand(click.Command):
    """``--help`` ends with every installed backend's options, read from the backends themselves."""

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        for backend in _installed_backends():
            rows = [(f"{backend.name}.{o.name}", o.help + (f" [default: {d}]" if (d := o.default_value()) is not None
                                                             else "")) for o in backend.options]  # fmt: skip
            with formatter.section(f"Backend options of {backend.name} (--backend-option NAME=VALUE)"):
                formatter.write_dl(rows or [("(none)", "")])


def _alias_dest(flag: str) -> str:
    """The click parameter an alias fills: one per flag."""
    return "alias_" + flag.lstrip("-").replace("-", "_")


def _with_backend_aliases(command):
    for flag, claims in reversed(list(_aliases().items())):
        dest = _alias_dest(flag)
        backend, option = claims[0]
        same = " and ".join(f"--backend-option {b}.{o.name}" for b, o in claims)
        owners = ", ".join(b for b, _ in claims)
        if option.flag_value is not None:
            command = click.option(flag, dest, is_flag=True, flag_value=option.flag_value, default=None,
                                   help=f"{owners}: {option.flag_help or option.help} "
                                        f"(= {same}={option.flag_value})")(command)  # fmt: skip
        else:
            helps = "; ".join(f"{b}: {o.help}" for b, o in claims)
            command = click.option(flag, dest, default=None, metavar="VALUE",
                                   help=f"{helps} (= {same}=VALUE)")(command)  # fmt: skip
    return command


def backend_options_from(
    assignments: tuple[str, ...], aliases_given: dict[str, object], targets: tuple[str, ...] | None = None
) -> dict[str, dict]:
    """--backend-option BACKEND.NAME=VALUE and the aliases, as ``build(backend_options=...)``.

    An alias shared by several backends sets the option of each one among ``targets`` that
    takes the value (``--precision fp16``: tensorrt's, not the npu's); when none does, the
    first backend that would, so the build says to target it.
    """
    try:
        given = split_assignments(assignments)
    except OptionError as e:
        raise BuildError(str(e)) from None
    for flag, claims in _aliases().items():
        value = aliases_given.get(_alias_dest(flag))
        if value is None:
            continue
        chosen = [(b, o) for b, o in claims if targets is None or b in targets] or claims[:1]
        parsed, refusals = {}, []
        for backend, option in chosen:
            try:
                parsed[backend] = (option, option.parse(value) if isinstance(value, str) else value)
            except ValueError as e:
                refusals.append(f"{flag} {value!r}" + (f" ({backend})" if len(chosen) > 1 else "") + f": {e}")
        if not parsed:  # no target takes it: a backend that would names itself (build: "add --target tensorrt")
            for backend, option in claims:
                try:
                    parsed[backend] = (option, option.parse(value) if isinstance(value, str) else value)
                    break
                except ValueError:
                    continue
        if not parsed:
            raise BuildError(refusals[0])
        for backend, (option, result) in parsed.items():
            given.setdefault(backend, {})[option.name] = result
    return given


def _list_backends(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    """Eager, like --version: it answers before MODEL is required."""
    if not value or ctx.resilient_parsing:
        return
    click.echo("host (always)")
    for backend in _installed_backends():
        click.echo(f"{backend.name} (min region {backend.min_region_size} ops, "
                   f"{'weights in its payload' if backend.bind_constants else 'weights on the host'})")  # fmt: skip
    ctx.exit()


def reading_options(specs: tuple[str, ...]) -> dict[str, str]:
    """``--output-reading NAME=KIND`` options as ``QuantizeConfig.output_readings`` (its checks name a bad KIND)."""
    readings: dict[str, str] = {}
    for spec in specs:
        name, sep, kind = spec.rpartition("=")
        if not sep or not name:
            raise BuildError(f"--output-reading must look like NAME=values or NAME=classes, got {spec!r}")
        if name in readings:
            raise BuildError(f"--output-reading {spec!r}: output {name!r} was given a reading already")
        readings[name] = kind
    return readings


@click.command(cls=_BuildCommand, context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("model", type=click.Path(dir_okay=False))
@click.option("-o", "--output", type=click.Path(), help="Bundle to write (default: MODEL's name with .aotb).")
@click.option(
    "--target",
    "targets",
    multiple=True,
    metavar="BACKEND",
    help="Backend to offload to, highest priority first; repeatable. The host always runs the rest. "
    "Any installed backend: built in (npu, tensorrt, onnxruntime, openvino) or from a plugin package (--list-backends).",
)
@click.option(
    "--input", "inputs", multiple=True, metavar="NAME:SHAPE", help="Fix an input's shape, e.g. images:1x3x224x224."
)
@click.option(
    "--bind",
    "binds",
    multiple=True,
    metavar="NAME=VALUE",
    help="Bind an input to a value at build time, e.g. sr=16000 (a number or a short list 1,2,3, in the input's "
    "dtype): it becomes a constant, so an If on it folds, and leaves the bundle's inputs; repeatable.",
)
@click.option(
    "--min-region-size",
    type=click.IntRange(min=1),
    help="Keep regions with fewer ops than this on the host (default: each backend's own).",
)
@click.option(
    "--backend-option",
    "backend_assignments",
    multiple=True,
    metavar="BACKEND.NAME=VALUE",
    help="A backend's own build option, e.g. tensorrt.precision=fp16; repeatable (listed below).",
)
@_with_backend_aliases
@click.option(
    "--calibration",
    type=click.Path(exists=True, file_okay=False),
    metavar="DIR",
    help="Quantize to int8 (npu, tensorrt), calibrating on DIR's .npy samples (docs/quantization.md).",
)
@click.option(
    "--calibration-table",
    type=click.Path(exists=True, dir_okay=False),
    metavar="FILE",
    help="Quantize with the ranges of an earlier build's calibration table instead of calibrating.",
)
@click.option(
    "--calibration-method",
    type=click.Choice(list(METHODS)),
    default="auto",
    show_default=True,
    help="How a tensor's range is taken: auto tries minmax, percentile (99.99th of |x|), entropy (least KL "
    "divergence) and mse (least quantization error) on the held-back samples and keeps the best by task agreement.",
)
@click.option(
    "--accuracy-budget",
    metavar="PERCENT",
    help="Task agreement int8 may lose, e.g. 1% (or 0.01); past it the layers whose quantization costs most "
    "stay float, the fewest that meet it (an error where none do). Without it 1% applies as best it can; "
    "'off' keeps every layer int8.",
)
@click.option(
    "--holdout",
    type=click.FloatRange(0.0, 1.0, max_open=True),
    default=QuantizeConfig.holdout,
    show_default=True,
    help="Share of the calibration samples kept out of calibration, for the accuracy report.",
)
@click.option(
    "--output-reading",
    "output_readings",
    multiple=True,
    metavar="NAME=KIND",
    help="How the int8 report reads an output the graph cannot tell: values (relative L2 alone: a regression, a "
    "quality score) or classes (top-1 agreement); repeatable.",
)
@click.option("--print-graph", is_flag=True, help="Print the optimised graph, partitioned into regions, with why "
              "each op a target could take stayed on the host.")  # fmt: skip
@click.option("--list-backends", is_flag=True, expose_value=False, is_eager=True, callback=_list_backends,
              help="List the installed backends and exit (no MODEL needed).")  # fmt: skip
@click.option("-q", "--quiet", is_flag=True, help="Print nothing but errors.")
@click.option("--debug", is_flag=True, help="Show tracebacks for internal errors.")
@click.option("-v", "--verbose", is_flag=True, help="Also show third-party warnings known to be harmless "
              "(hidden by default; aot/quiet.py lists them).")  # fmt: skip
@click.version_option(package_name="aot", prog_name="aot-build")
def main(
    model, output, targets, inputs, binds, min_region_size, backend_assignments, calibration, calibration_table,
    calibration_method, accuracy_budget, holdout, output_readings, print_graph, quiet, debug, verbose,
    **aliases_given,
):  # fmt: skip
    """Compile MODEL (an ONNX file or a torch.export .pt2) into one runtime_lite bundle."""
    output = output or os.path.splitext(os.path.basename(model))[0] + ".aotb"
    start = time.perf_counter()
    show_third_party_warnings(verbose)

    def progress(stage: str, seconds: float) -> None:
        if not quiet:
            click.echo(f"  {stage:<9}{seconds:6.2f} s", err=True)

    try:
        _check_model(model)
        _check_output(model, output)
        shapes = input_shapes(inputs)
        values = bound_values(binds)
        quantize = None
        if calibration or calibration_table:
            off = accuracy_budget is not None and accuracy_budget.lower() == "off"
            quantize = QuantizeConfig(calibration, calibration_method, table=calibration_table, holdout=holdout,
                                      accuracy_budget=None if off else parse_budget(accuracy_budget),
                                      mixed_precision=not off, output_readings=reading_options(output_readings))  # fmt: skip
        elif accuracy_budget is not None or output_readings:
            given = "--accuracy-budget" if accuracy_budget is not None else "--output-reading"
            raise BuildError(f"{given} applies to an int8 build: add --calibration DIR")
        result = build(
            model,
            targets=targets or ("host",),
            input_shapes=shapes,
            input_values=values,
            min_region_size=min_region_size,
            backend_options=backend_options_from(backend_assignments, aliases_given, targets),
            progress=progress,
            log=None if quiet else sys.stderr,
            quantize=quantize,
        )
        size = result.save(output)
        progress("write", result.timings["write"])
        if result.quantization is not None and result.quantization.table.tensors:  # none: nothing calibrated
            table_path = calibration_table_path(output)
            if not (calibration_table and os.path.abspath(calibration_table) == os.path.abspath(table_path)):
                result.quantization.table.save(table_path)
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
        for backend, lines in result.reports.items():
            for line in lines:
                click.echo(f"  {backend:<8} {line}")
        if result.quantization is not None and result.quantization.table.tensors:
            table = result.quantization.table
            click.echo(f"  int8     calibration table {calibration_table_path(output)} ({table.digest[:12]}, "
                       f"{table.method}, {table.samples} samples)")  # fmt: skip


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
