"""Isolated suggestors: built and called in worker processes, their replies validated here.

`_wire` frames JSON messages over a socket, `_worker` is the worker's main loop, `_pool`
starts, lends and kills the workers (`_process` is one of them, `_guard` what keeps the
engine's secrets from them), `_spec` is what an isolated suggestor sends a worker, and
`_suggestor` is the suggestor the engine registers.
"""
