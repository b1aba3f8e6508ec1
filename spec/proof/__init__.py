"""What must always hold, and its proof: the invariant catalogue, the z3 prover, its term utilities and the
brute-force cross-check that keeps the prover honest."""
