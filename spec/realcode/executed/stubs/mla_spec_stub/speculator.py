"""0.34.0+: ``SpeculativeConfig.speculator_config``, the per-method ``SpeculatorConfig`` the engine resolves.

vllm/config/speculative.py 0.34.0 L1743-1751 answers
``max_num_new_slots_for_drafting`` from ``self.speculator_config`` (L1419-1422),
an instance of the class ``_CONFIG_BY_METHOD[method]`` names
(vllm/v1/worker/gpu/spec_decode/speculator_config.py L298-311), after
``__post_init__`` has folded every ``MTPModelTypes`` name into ``"mtp"``
(speculative.py L1375-1379).  Both tables are the release's, executed from its
tree; the property is the release's own definition of the resolved class, or
of the nearest base class that defines it (``SpeculatorConfig`` L128: 0),
found by following the class's bases through the files that define them.
"""

from __future__ import annotations

import ast
import functools
from typing import Any, Literal, get_args  # noqa: F401  (Literal: read by the release's MTPModelTypes)

from mla_spec_stub import STATE, StubMissing, class_method_defs, parsed_release_file, release_defs

_CONFIG = "vllm/v1/worker/gpu/spec_decode/speculator_config.py"
_PROPERTY = "max_num_new_slots_for_drafting"


def defines_speculators() -> bool:
    return (STATE.tree / _CONFIG).is_file()


@functools.lru_cache(maxsize=1)
def _tables() -> dict[str, Any]:
    ns: dict[str, Any] = {"Literal": Literal}
    release_defs(_CONFIG, ("_PKG", "_builtin", "_CONFIG_BY_METHOD"), ns)
    release_defs("vllm/config/speculative.py", ("MTPModelTypes",), ns)
    return ns


def _relpath(qualname: str) -> tuple[str, str]:
    module, _, name = qualname.rpartition(".")
    return module.replace(".", "/") + ".py", name


@functools.cache
def _property(relpath: str, class_name: str) -> Any:
    """The release's ``max_num_new_slots_for_drafting`` as ``class_name`` in ``relpath`` inherits it."""
    _, tree = parsed_release_file(relpath)
    imported = {
        a.asname or a.name: n.module
        for n in tree.body
        if isinstance(n, ast.ImportFrom) and n.module
        for a in n.names
    }
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            found = class_method_defs(relpath, class_name, (_PROPERTY,), {}, optional=True)
            if _PROPERTY in found:
                return found[_PROPERTY]
            for base in node.bases:
                name = ast.unparse(base)
                where = relpath if name not in imported else _relpath(f"{imported[name]}.{name}")[0]
                return _property(where, name)
    raise StubMissing(f"{relpath} of this release defines no class {class_name} with {_PROPERTY}")


class SpeculatorConfig:
    """The resolved per-method config, carrying only the release's ``max_num_new_slots_for_drafting``."""

    def __init__(self, spec_config: Any) -> None:
        self.num_speculative_tokens = spec_config.num_speculative_tokens


def speculator_config(spec_config: Any) -> SpeculatorConfig:
    ns = _tables()
    method = spec_config.method
    if method in get_args(ns["MTPModelTypes"]):
        method = "mtp"
    if method not in ns["_CONFIG_BY_METHOD"]:
        raise ValueError(f"Unsupported speculative method: '{method}'")
    relpath, name = _relpath(ns["_CONFIG_BY_METHOD"][method])
    cls = type(name, (SpeculatorConfig,), {_PROPERTY: _property(relpath, name)})
    return cls(spec_config)
