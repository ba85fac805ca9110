"""The PyTorch frontend: programs from ``torch.export`` (or saved ``.pt2`` files) to the IR.

    import torch, aot
    program = torch.export.export(model.eval(), (example,))
    graph = aot.frontend.from_exported_program(program)
    aot.build(program, targets=["npu"]).save("model.aotb")   # the same, in one step

torch is an optional dependency (aot's ``torch`` extra, ``torch==2.13.0``), imported only here.
"""

from aot.frontend.torch.importer import from_exported_program, load_exported_program

__all__ = ["from_exported_program", "load_exported_program"]
