"""MLA models and the deployments they make: who a counterexample class hits.

``deployments.toml`` (bundled with this package) lists MLA checkpoints with their query heads, each cited
to its published Hugging Face config (sources §49-§53), and the drafters each is usually served with
(sources §54-§56).  A :class:`Deployment` is one model at one TP size with one KV-cache dtype and one
drafter (or none); a rank decodes ``heads / TP`` heads (DCP 1).  ``mla-spec explain --model NAME --tp N``
reads the heads from here, and :mod:`spec.analyses.hits` names the deployments a counterexample class hits.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from mla_model.shape import KV_CACHE_DTYPES, SPEC_METHODS

_CITATION = re.compile(r"^sources §\d+$")


@dataclass(frozen=True)
class Drafter:
    """A drafter a model is served with: its vLLM method names (one drafter, spelled as the releases
    spell it; the first names it) and the speculative-token counts it is run with."""

    methods: tuple[str, ...]
    ks: tuple[int, ...]
    source: str

    @property
    def method(self) -> str:
        return self.methods[0]


@dataclass(frozen=True)
class Model:
    """One MLA checkpoint family: its query heads (``config_key`` of the config at ``config``)."""

    name: str
    aliases: tuple[str, ...]
    heads: int
    config: str
    config_key: str
    source: str
    drafters: tuple[Drafter, ...]
    tp_sizes: tuple[int, ...]  # the bundled TP sizes that divide ``heads``

    def heads_per_rank(self, tp: int) -> int:
        """``heads / tp``; a ``ValueError`` naming the model when ``tp`` does not divide its heads."""
        if tp < 1 or self.heads % tp:
            divisors = ", ".join(str(t) for t in range(1, self.heads + 1) if self.heads % t == 0)
            raise ValueError(
                f"--tp {tp} does not divide {self.name}'s {self.heads} MLA heads "
                f"(TP sizes that do: {divisors})"
            )
        return self.heads // tp


@dataclass(frozen=True)
class Deployment:
    """One way a model is served: TP size, KV-cache dtype, drafter and its k (``none`` and 0 without)."""

    model: str
    tp: int
    num_heads: int  # heads per rank
    kv_cache_dtype: str  # "auto" (the bf16 model dtype) or "fp8"
    spec_methods: tuple[str, ...]  # the drafter's vLLM spellings, ("none",) without one
    num_spec_tokens: int

    @property
    def label(self) -> str:
        """Short and human: ``Kimi-K3 TP8 fp8``, ``DeepSeek-V3 TP8 bf16 mtp k=1``."""
        kv = "bf16" if self.kv_cache_dtype == "auto" else self.kv_cache_dtype
        drafter = (
            "" if self.spec_methods == ("none",) else f" {self.spec_methods[0]} k={self.num_spec_tokens}"
        )
        return f"{self.model} TP{self.tp} {kv}{drafter}"


def _cited(entry: dict[str, Any], what: str) -> str:
    source = entry.get("source", "")
    if not _CITATION.match(source):
        raise ValueError(f"deployments.toml: {what} cites no source ('sources §N'), got {source!r}")
    return source


def parse_models(data: dict[str, Any]) -> tuple[Model, ...]:
    """The models of a parsed ``deployments.toml``, checked: cited, known drafter names, positive counts."""
    tp_sizes = tuple(data["tp_sizes"])
    models = []
    for entry in data["model"]:
        name, heads = entry["name"], entry["heads"]
        if not isinstance(heads, int) or heads < 1:
            raise ValueError(f"deployments.toml: {name} has {heads!r} heads")
        drafters = []
        for d in entry.get("drafter", []):
            unknown = [m for m in d["methods"] if m not in SPEC_METHODS or m == "none"]
            if unknown or not d["methods"] or not d["k"] or min(d["k"]) < 1:
                raise ValueError(f"deployments.toml: {name} has a bad drafter {d!r}")
            drafters.append(Drafter(tuple(d["methods"]), tuple(d["k"]), _cited(d, f"{name}'s drafter")))
        models.append(
            Model(
                name=name,
                aliases=tuple(entry.get("also", ())),
                heads=heads,
                config=entry["config"],
                config_key=entry["config_key"],
                source=_cited(entry, name),
                drafters=tuple(drafters),
                tp_sizes=tuple(tp for tp in tp_sizes if heads % tp == 0),
            )
        )
    return tuple(models)


@cache
def _table() -> dict[str, Any]:
    return tomllib.loads(resources.files("mla_model").joinpath("deployments.toml").read_text())


@cache
def models() -> tuple[Model, ...]:
    """The bundled MLA models, in file order."""
    return parse_models(_table())


def find_model(name: str) -> Model:
    """The model called ``name`` (or one of its aliases), any case; a ``ValueError`` listing the known."""
    for model in models():
        if name.casefold() in (n.casefold() for n in (model.name, *model.aliases)):
            return model
    known = ", ".join(n for m in models() for n in (m.name, *m.aliases))
    raise ValueError(f"unknown model {name!r}; known MLA models: {known}")


@cache
def deployments() -> tuple[Deployment, ...]:
    """Every bundled deployment: model x TP x KV-cache dtype x (no drafter, each drafter and k)."""
    kv_dtypes = tuple(_table()["kv_cache_dtypes"])
    assert set(kv_dtypes) <= set(KV_CACHE_DTYPES)
    return tuple(
        Deployment(model.name, tp, model.heads_per_rank(tp), kv, methods, k)
        for model in models()
        for tp in model.tp_sizes
        for kv in kv_dtypes
        for methods, k in [(("none",), 0)] + [(d.methods, k) for d in model.drafters for k in d.ks]
    )
