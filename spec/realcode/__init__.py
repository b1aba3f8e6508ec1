"""The real code: vLLM's rocm_aiter_mla.py, loaded without running it, bound to the model.

source   -- find the file: a path, a vLLM tree or installed package, or a release from PyPI
extract  -- pick the gate definitions out of the file with ast, and refuse anything unsafe
sandbox  -- execute only those definitions against platform stubs
symexec  -- lift a real predicate into z3 by path exploration
revision -- a gate revision whose gates are the real functions
bind     -- compare real functions with a model revision over a bounded box
"""
