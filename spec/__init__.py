"""mla-spec's specification layer, grouped by job (docs/explanation/architecture.md draws it):

* :mod:`spec.proof`: the invariant catalogue, the z3 prover, its public term utilities and the
  brute-force cross-check;
* :mod:`spec.analyses`: what is built on proofs: gate diffs, regions, the routing graph, edge-shape
  cases, explain, mutation;
* :mod:`spec.realcode`: a vLLM release's own code, lifted into z3 and executed.
"""
