"""Isolated suggestors: built and called in worker processes, their replies validated here.

`_wire` frames JSON messages over a socket, `_worker` is the worker's main loop, `_pool`
starts, lends and kills the workers, and `_suggestor` is the suggestor the engine registers.
"""
