"""mla-spec executable model: the parameter space, gate revisions, AITER registry."""
