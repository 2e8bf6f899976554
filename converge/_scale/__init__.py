"""Batches of whole runs: a shard as a worker runs it, and the batch's result (`converge.dask`)."""
