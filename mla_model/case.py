"""A test case: one concrete decode step and the route a gate revision gives it.

Cases are written by ``mla-spec cases`` (spec/analyses/cases.py, which needs z3) and
read by the generated pytest modules and by the GPU conformance runner, which
has no z3; so this module depends on nothing but the model.

One Case per JSON line, keys in this order::

    {"id", "shape", "expected_route", "origin", "revision", "registry", "seed", "expected_outcome"}

``expected_route`` is :func:`expected_route`: the route fields a test pins and
a replay needs (path, the gates, metadata sizing, head padding, what AITER is
asked for and the kernel it finds).  ``expected_outcome`` is
:func:`expected_outcome`: the replay status the case's class predicts, from the
symptom ``check`` gives the step (:func:`mla_model.failures.symptom_of`).
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mla_model.decision import decide
from mla_model.limits import cut, cut_text, json_lines
from mla_model.registry import NO_KERNEL, Registry, resolved_kernel
from mla_model.revisions.base import Revision
from mla_model.shape import FP8_KV_CACHE_DTYPES, GIB, SPEC_METHODS, Shape


@dataclass(frozen=True)
class Case:
    id: str
    shape: Shape
    expected_route: dict[str, Any]
    origin: str  # the invariant, decision or condition the shape was found for
    revision: str
    registry: str
    seed: int  # seeds the replay's random inputs
    expected_outcome: dict[str, str]  # the replay status the class predicts and why (expected_outcome)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "shape": self.shape.to_json(),
            "expected_route": self.expected_route,
            "origin": self.origin,
            "revision": self.revision,
            "registry": self.registry,
            "seed": self.seed,
            "expected_outcome": self.expected_outcome,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Case:
        missing = sorted(
            {"id", "shape", "expected_route", "origin", "revision", "registry", "seed", "expected_outcome"}
            - set(data)
        )
        if missing:
            raise ValueError(f"case {cut(data.get('id', '?'))} lacks {', '.join(missing)}")
        # The JSON type of each field, so that a hand-edited line is refused here, naming it, not later.
        for key, kind, noun in _FIELD_TYPES:
            if not isinstance(data[key], kind) or isinstance(data[key], bool):
                raise ValueError(f"case {cut(data['id'])}: {key} {cut(data[key])} is not {noun}")
        if data["expected_outcome"].get("status") not in ACCEPTED:
            raise ValueError(
                f"case {cut(data['id'])}: expected_outcome {cut(data['expected_outcome'])} has no status "
                f"({', '.join(ACCEPTED)})"
            )
        return cls(
            data["id"],
            Shape.from_json(data["shape"]),
            data["expected_route"],
            data["origin"],
            data["revision"],
            data["registry"],
            data["seed"],
            data["expected_outcome"],
        )


_FIELD_TYPES = (
    ("id", str, "a string"),
    ("expected_route", dict, "an object"),
    ("origin", str, "a string"),
    ("revision", str, "a string"),
    ("registry", str, "a string"),
    ("seed", int, "an integer"),
    ("expected_outcome", dict, "an object"),
)


def expected_route(revision: Revision, registry: Registry, shape: Shape) -> dict[str, Any]:
    """The route fields a case pins, as plain JSON values."""
    d = decide(revision, registry, shape)
    r, a = d.route, d.asm
    on_asm = r.path.startswith("asm")
    return {
        "path": r.path,
        "use_gluon_decode": bool(r.use_gluon_decode),
        "use_gluon_verify": bool(r.use_gluon_verify),
        "use_persistent_metadata": bool(r.use_persistent_metadata),
        "mtp_decode_qlen": int(r.mtp_decode_qlen),
        "head_padding": r.head_padding,
        "padded_q_heads": int(r.padded_q_heads),
        "kernel_qlen": int(r.request.kernel_qlen),
        "q_dtype": r.request.q_dtype,
        "kv_dtype": r.request.kv_dtype,
        "causal": bool(r.request.causal),
        "aiter_persistent": bool(a.persistent) if on_asm else None,
        "kernel": _kernel_json(resolved_kernel(registry, shape.arch, r.request, a)) if on_asm else None,
        "vllm_raises": bool(r.vllm_raises),
        "dcp_route": r.dcp_route,
        "lse": bool(r.request.lse),
        "cprr": bool(r.request.cprr),
    }


# What a replay of a step shows for each symptom kind check gives it (mla_model.failures): the predicted
# status, and the statuses that count as it (a wrong output may be finite or not; a crash may be a refusal).
OUTCOME_OF_SYMPTOM = {"crash": "CRASH", "silent-wrong-output": "MISMATCH"}
ACCEPTED = {"PASS": ("PASS",), "MISMATCH": ("MISMATCH", "NAN"), "CRASH": ("CRASH", "NO_KERNEL")}
ACCEPTED["NO_KERNEL"] = ACCEPTED["CRASH"]


def expected_outcome(revision: Revision, registry: Registry, shape: Shape) -> dict[str, str]:
    """The replay status the step's class predicts and its cause, from the step's symptom
    (:func:`mla_model.failures.symptom_of`): a crash is NO_KERNEL where the stack refuses the request and
    CRASH otherwise, a silent wrong output MISMATCH, anything else (no symptom, performance only) PASS;
    ``cause`` is the symptom's cause (``none`` for none)."""
    from mla_model.failures import REFUSALS, symptom_of

    symptom = symptom_of(decide(revision, registry, shape), registry)
    status = OUTCOME_OF_SYMPTOM.get(symptom.kind, "PASS")
    if symptom.kind == "crash" and symptom.cause in REFUSALS:
        status = "NO_KERNEL"
    return {"status": status, "cause": symptom.cause}


def is_expected(predicted: str, status: str) -> bool:
    """Whether a replay's status is the one its case predicts (:data:`ACCEPTED`)."""
    return status in ACCEPTED.get(predicted, (predicted,))


def stale_cases(cases: Iterable[Case]) -> list[str]:
    """Ids of the cases whose pinned route or predicted outcome is no longer what their model revision gives
    them."""
    from mla_model.registry import load_registry
    from mla_model.revisions import get_revision

    out = []
    for c in cases:
        revision, registry = get_revision(c.revision), load_registry(c.registry)
        if (
            expected_route(revision, registry, c.shape) != c.expected_route
            or expected_outcome(revision, registry, c.shape) != c.expected_outcome
        ):
            out.append(c.id)
    return out


def case_id(shape: Shape) -> str:
    """A readable id that tells shapes apart: ``gfx950-fp8-h12-q5-dspark3-auto`` plus what is not default."""
    # k follows the method's name; after a name that ends in a digit (eagle3) a "k" keeps them apart.
    joint = "k" if shape.spec_method[-1].isdigit() else ""
    drafter = (
        "nospec" if shape.spec_method == "none" else f"{shape.spec_method}{joint}{shape.num_spec_tokens}"
    )
    parts = [
        shape.arch,
        shape.kv_cache_dtype,
        f"h{shape.num_heads}",
        f"q{shape.max_qo_len}",
        drafter,
        shape.asm_padding_mode,
    ]
    default_q = "fp8" if shape.kv_cache_dtype in FP8_KV_CACHE_DTYPES else "bf16"
    if shape.q_dtype != default_q:
        parts.append(f"q{shape.q_dtype}")
    if shape.num_reqs != 1:
        parts.append(f"b{shape.num_reqs}")
    if shape.dcp_world_size != 1:
        parts.append(f"dcp{shape.dcp_world_size}")
    if shape.gluon_build != (shape.arch == "gfx950"):
        parts.append("gluonbuild" if shape.gluon_build else "nogluonbuild")
    if not shape.causal:
        parts.append("noncausal")
    if shape.kv_cache_bytes != GIB:
        over = shape.kv_cache_bytes - 2 * GIB
        parts.append(
            "kv2g" if over == 0 else f"kv2g+{over}" if 0 < over < GIB else f"kv{shape.kv_cache_bytes}b"
        )
    return "-".join(parts)


def parse_case_id(text: str) -> Shape:
    """The Shape a :func:`case_id` names (the inverse of case_id for every shape it can write)."""
    parts = text.split("-")
    try:
        if len(parts) < 6 or not (parts[2].startswith("h") and parts[3].startswith("q")):
            raise ValueError
        arch, kv, heads, qlen, drafter, mode, *extra = parts
        method = drafter.rstrip("0123456789")
        if method.endswith("k") and method[:-1] in SPEC_METHODS and method[-2].isdigit():
            method = method[:-1]
            drafter = method + drafter[len(method) + 1 :]
        data: dict[str, Any] = dict(
            arch=arch,
            kv_cache_dtype=kv,
            num_heads=int(heads[1:]),
            max_qo_len=int(qlen[1:]),
            asm_padding_mode=mode,
        )
        if method == "nospec":
            data.update(spec_method="none", num_spec_tokens=0)
        else:
            data.update(spec_method=method, num_spec_tokens=int(drafter[len(method) :]))
        for part in extra:
            if part in ("qbf16", "qfp8"):
                data["q_dtype"] = part[1:]
            elif part.startswith("dcp"):
                data["dcp_world_size"] = int(part[3:])
            elif part in ("gluonbuild", "nogluonbuild"):
                data["gluon_build"] = part == "gluonbuild"
            elif part == "noncausal":
                data["causal"] = False
            elif part.startswith("kv2g"):
                data["kv_cache_bytes"] = 2 * GIB + int(part[4:] or 0)
            elif part.startswith("kv") and part.endswith("b"):
                data["kv_cache_bytes"] = int(part[2:-1])
            elif part.startswith("b"):
                data["num_reqs"] = int(part[1:])
            else:
                raise ValueError
        return Shape(**data)
    except ValueError as e:
        detail = f": {e}" if str(e) and "invalid literal" not in str(e) else ""
        raise ValueError(f"{text!r} is not a case id (arch-kv-hN-qN-drafterK-mode[-...]){detail}") from None


def case_seed(case_id_: str) -> int:
    """A stable seed from the id (crc32), so the same case gets the same inputs everywhere."""
    return zlib.crc32(case_id_.encode())


def write_cases(cases: Iterable[Case], path: Path) -> None:
    """One case per line, keys in a fixed order, a newline at the end: byte-identical reruns."""
    Path(path).write_text(cases_text(cases))


def cases_text(cases: Iterable[Case]) -> str:
    """What :func:`write_cases` writes."""
    return "".join(json.dumps(c.to_json(), separators=(",", ":")) + "\n" for c in cases)


def read_cases(path: Path) -> list[Case]:
    """The cases of a JSONL file; a bad line is a ValueError naming the file and line (see
    :func:`iter_cases`)."""
    return list(iter_cases(path))


def iter_cases(path: Path) -> Iterator[Case]:
    """The cases of a JSONL file one at a time (see :func:`located_cases`)."""
    for _, _, case in located_cases(path):
        yield case


def located_cases(path: Path, start: int = 0, first_line: int = 1) -> Iterator[tuple[int, int, Case]]:
    """``(line number, byte offset where the line starts, case)`` of each case of a JSONL file from byte
    ``start`` (line ``first_line``), one at a time, read within :mod:`mla_model.limits` (a device or a FIFO
    is refused before it is opened; a line too long or nested too deep is refused before it is parsed); a
    bad line is a ValueError naming the file and line, its values cut to a readable length."""
    at = start
    for n, after, line in json_lines(path, "cases file", start, first_line):
        begin, at = at, after
        if not line.strip():
            continue
        try:
            data = json.loads(line)
            if not isinstance(data, dict):
                raise ValueError(f"a case is a JSON object, not {type(data).__name__}")
            case = Case.from_json(data)
        except (ValueError, TypeError, KeyError) as e:
            raise ValueError(f"{path}:{n}: {cut_text(str(e))}") from None
        yield n, begin, case


def case_at(path: Path, offset: int, line: int) -> Case:
    """The case on line ``line`` of a JSONL file, which starts at byte ``offset`` (from
    :func:`located_cases`): one line read, not the file.  A ValueError where no case starts there (the
    file changed)."""
    for n, _, case in located_cases(path, offset, line):
        if n == line:
            return case
        break
    raise ValueError(f"{path}:{line}: no case starts at byte {offset:,} (the file changed since it was read)")


def _kernel_json(name: str) -> str | None:
    """A resolved kernel as the case JSON spells it: null where AITER has none (NO_KERNEL)."""
    return None if name == NO_KERNEL else name
