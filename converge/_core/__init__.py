"""The data: what a run is made of and what users build on.

Frozen models and small frozen classes (keys, proposals, effects, facts and their seal, the
context, budgets, stop reasons, the HITL policy, invariants, the trace and its events, the
result, checkpoints and stored records), the protocols users implement (`Suggestor`,
`Invariant`, `Pack`, `RunStore`), the errors, and the text rules everything shares
(canonical JSON, storable and visible text). It imports nothing else of converge.
"""
