"""Execute a vLLM release's real ``rocm_aiter_mla.py`` and record the AITER calls it makes.

The release file is imported as a module in a child process (scratch working
directory) whose ``vllm`` and ``aiter`` packages are the stubs under
``stubs/``, never an installed vLLM or AITER.  The real
``AiterMLAMetadataBuilder`` and ``AiterMLAImpl`` then run per Shape: the
builder's ``__init__`` (threshold, ``_mtp_decode_qlen``, buffer sizing), its
``build``/``_build_decode``, and ``forward_mqa`` on real tensors.  Every AITER
entry point is bound to a recorder that keeps the call as vLLM made it and
fails where AITER would fail, from the registry.

* :mod:`.harness`: the parent side (spawn the child, send shapes, read records);
* :mod:`.child`: the child side (import guard, the release module, one step per shape);
* :mod:`.differential`: the model's Route against the recorded call.
"""
