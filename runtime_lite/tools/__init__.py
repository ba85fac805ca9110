"""The `runtime-lite` command line: run, info, bench, backends, warm, serve.

The top layer: it uses the execution layer's public API and nothing here is imported
by the runtime itself.
"""
