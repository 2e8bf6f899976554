"""The converge performance suite: workloads W1-W4 of the performance contract.

Run it from the repository root with `python -m benchmarks` (or `make bench`); it prints one
JSON object to stdout and its progress to stderr. `benchmarks/README.md` describes each
workload, how it is measured, and the figures measured on the reference machine.
"""
