"""``python -m conformance`` runs the mla-spec command line."""

from conformance.cli import main

main()
