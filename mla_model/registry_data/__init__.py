"""Bundled AITER registries (our TOML encoding of AITER facts, one file per release)."""
