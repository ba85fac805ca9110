"""Execution: the loaded Module, its host plan, run budgets, placement and traces.

Builds on the format layer (what a bundle declares) and the backends (who runs each
module); knows nothing of the command line or serving.
"""
