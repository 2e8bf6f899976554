"""The engine's machinery: one cycle, its sources, the gate and the merge.

The registry of a run, the executor and its calls, retries, the run loop (`_run.RunLoop`),
live and recorded effect sources, pause and resume, the run's state and its log, and the
one narration channel (`_run_events`). It imports `_core` only; the engine facade
(`converge._engine`, through `converge._launch`) wires it to a store.
"""
