"""Run a vLLM-style test module against a release's real gates, without vLLM installed.

``mla-spec cases --style vllm`` writes a module for tests/v1/attention/ of a
vLLM checkout.  To prove it runs before anyone copies it there, this shim puts
``vllm.platforms`` (ROCm) and ``vllm.v1.attention.backends.mla.rocm_aiter_mla``
in ``sys.modules``; the latter is the release's own ``AiterMLAHelper`` and its
module-level functions as the real-code loader executes them (spec.realcode:
extracted by ast, run in the sandbox), plus an ``AiterMLAMetadataBuilder``
whose ``__init__`` calls the (monkeypatched) common builder ``__init__`` and
then the release's own statements that set ``_mtp_decode_qlen``.

    python -m conformance.vllm_shim --vllm 0.28.0 test_rocm_aiter_mla_mlaspec_routing.py [pytest args]

Monkeypatching a module attribute (``_gluon_mla_decode_supported``) writes
through to the namespace the real functions read their globals from, so the
pins act on the real code as they do in vLLM.
"""

from __future__ import annotations

import os
import sys
import tempfile
import types
from typing import Any

from spec.realcode.extract import HELPER, extract
from spec.realcode.sandbox import LoadedCode
from spec.realcode.source import SourceError, dcp_verify_default, resolve

MODULE = "vllm.v1.attention.backends.mla.rocm_aiter_mla"


class _LoadedModule(types.ModuleType):
    """A module whose attributes are the loaded code's globals: reads and writes go to that namespace."""

    def __init__(self, code: LoadedCode, extra: dict[str, Any]) -> None:
        super().__init__(MODULE)
        object.__setattr__(self, "_code", code)
        code.namespace.update(extra)

    def __getattr__(self, name: str) -> Any:
        try:
            return self._code.namespace[name]
        except KeyError:
            raise AttributeError(f"module {MODULE!r} (mla-spec shim) has no attribute {name!r}") from None

    def __setattr__(self, name: str, value: Any) -> None:
        self._code.namespace[name] = value
        self._code.clear_caches()

    def __delattr__(self, name: str) -> None:
        self._code.namespace.pop(name, None)
        self._code.clear_caches()


def shim_modules(release: str) -> dict[str, types.ModuleType]:
    """The sys.modules entries that stand in for vLLM, with ``release``'s real gates inside."""
    source = resolve(release)
    code = LoadedCode(extract(source))
    code.platform.dcp_verify = dcp_verify_default(source.path)
    init_slice = code.namespace["mla_spec_builder_init"]

    class MLACommonMetadataBuilder:
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            raise RuntimeError(
                "mla-spec shim: MLACommonMetadataBuilder.__init__ is vLLM's; "
                "monkeypatch it as vLLM's own builder tests do"
            )

    class AiterMLAMetadataBuilder(MLACommonMetadataBuilder):
        """Runs the common __init__, then the release's own statements that size the persistent metadata."""

        def __init__(self, kv_cache_spec: Any, layer_names: Any, vllm_config: Any, device: Any) -> None:
            super().__init__(kv_cache_spec, layer_names, vllm_config, device)
            code.refresh_caches()
            init_slice(self, kv_cache_spec, vllm_config)

    module = _LoadedModule(
        code,
        {
            "AiterMLAMetadataBuilder": AiterMLAMetadataBuilder,
            "MLACommonMetadataBuilder": MLACommonMetadataBuilder,
        },
    )
    assert module.AiterMLAHelper is code.namespace[HELPER]
    platform = types.SimpleNamespace(is_rocm=lambda: True, is_cuda=lambda: False)
    packages = {
        name: types.ModuleType(name)
        for name in (
            "vllm",
            "vllm.v1",
            "vllm.v1.attention",
            "vllm.v1.attention.backends",
            "vllm.v1.attention.backends.mla",
        )
    }
    for pkg in packages.values():
        pkg.__path__ = []  # a package, so "from vllm.v1... import rocm_aiter_mla" resolves the submodule
    platforms = types.ModuleType("vllm.platforms")
    platforms.current_platform = platform
    packages["vllm"].platforms = platforms
    packages["vllm.v1.attention.backends.mla"].rocm_aiter_mla = module
    return {**packages, "vllm.platforms": platforms, MODULE: module}


def main(argv: list[str] | None = None) -> int:
    import pytest

    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) < 3 or args[0] != "--vllm":
        print(
            "usage: python -m conformance.vllm_shim --vllm RELEASE|PATH TEST_MODULE [pytest args]",
            file=sys.stderr,
        )
        return 2
    try:
        sys.modules.update(shim_modules(args[1]))
    except SourceError as e:
        print(f"mla-spec: error: {e}", file=sys.stderr)
        return 2
    # Isolated: rootdir and an empty ini in a scratch folder, no conftest.py, no cache, no autoloaded plugin;
    # nothing beside the module or in the working folder configures the run.
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    with tempfile.TemporaryDirectory(prefix="mla-spec-shim-") as scratch:
        ini = os.path.join(scratch, "pytest.ini")
        with open(ini, "w") as f:
            f.write("[pytest]\n")
        isolated = ["-p", "no:cacheprovider", "--rootdir", scratch, "-c", ini, "--confcutdir", scratch]
        return int(pytest.main([*args[2:], *isolated, "--noconftest"]))


if __name__ == "__main__":
    sys.exit(main())
