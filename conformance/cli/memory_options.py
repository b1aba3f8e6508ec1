"""The memory options ``explain`` and ``check`` share: ``--max-num-seqs`` and ``--memory-budget``."""

from __future__ import annotations

import re
from typing import Any

import click

MAX_NUM_SEQS = 1 << 16  # far past any served batch; the sizing is arithmetic on meta tensors either way
MAX_BUDGET = 1 << 50  # 1 PiB: past any GPU's memory
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40, "p": 1 << 50}
_BYTES = re.compile(r"^\s*(\d{1,16})\s*(?:([kmgtp])(?:i?b)?|b)?\s*$", re.IGNORECASE)


class ByteCount(click.ParamType):
    """A whole number of bytes, optionally with a binary unit (``16GiB``, ``512M``), 1 B to 1 PiB."""

    name = "bytes"

    def convert(self, value: Any, param: Any, ctx: Any) -> int:
        if isinstance(value, int) and not isinstance(value, bool):
            n = value
        else:
            m = _BYTES.match(str(value))
            if m is None:
                self.fail(
                    f"{str(value)[:40]!r} is not a number of bytes (e.g. 17179869184 or 16GiB)", param, ctx
                )
            n = int(m.group(1)) * _UNITS[(m.group(2) or "").lower()]
        if not 1 <= n <= MAX_BUDGET:
            self.fail(f"{n} bytes is outside 1 B .. 1 PiB", param, ctx)
        return n


def max_num_seqs_option(help_suffix: str = "") -> Any:
    return click.option(
        "--max-num-seqs",
        "max_num_seqs",
        type=click.IntRange(1, MAX_NUM_SEQS),
        metavar="N",
        help="vLLM's --max-num-seqs the persistent buffers are sized for (default: vLLM's own default for "
        "`vllm serve` on the arch's GPU, from the release's EngineArgs.get_batch_defaults)"
        + help_suffix
        + ".",
    )


def memory_budget_option() -> Any:
    return click.option(
        "--memory-budget",
        "memory_budget",
        type=ByteCount(),
        metavar="BYTES",
        help="After the verdicts, measure each release's persistent decode metadata plus AITER's reduce "
        "scratch for every bundled deployment on both archs, name those above BYTES (a number, or with a "
        "unit: 16GiB), and exit 1 if any is (docs/reference/memory.md).",
    )
