"""mla-spec conformance layer and the command line."""
