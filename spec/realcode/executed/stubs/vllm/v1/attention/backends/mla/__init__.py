"""The release's ``rocm_aiter_mla`` is registered here by the harness (it is not a stub)."""
