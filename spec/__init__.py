"""mla-spec specification layer: invariants, the z3 prover and the brute-force cross-check."""
