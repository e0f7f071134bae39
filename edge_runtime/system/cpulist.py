"""Pure parsers for the kernel's CPU lists and masks (`0-3,5`, `f0`, `isolcpus=managed_irq,domain,2-3`).

No I/O here: these are tested alone with tables of real inputs (see Documentation/admin-guide/cputopology.rst and
kernel-parameters.txt, "cpu lists").
"""

from __future__ import annotations

import re
from collections.abc import Iterable

MAX_CPUS = 8192  # CONFIG_NR_CPUS tops out at 8192: a larger number is a typo, not a machine

_DECIMAL = re.compile(r"[+-]?[0-9]+")
_HEX = re.compile(r"[0-9a-fA-F]+")


def ascii_int(text: str) -> int:
    """A decimal integer as the kernel writes one: ASCII digits only. Python's int() also takes '٤٥', '4_5' and
    surrounding junk-free Unicode digits; a sysfs value spelled like that is garbled, not a number. ValueError if so."""
    t = text.strip()
    if not _DECIMAL.fullmatch(t):
        raise ValueError(f"{text!r} is not a number")
    return int(t)


def is_number(text: str) -> bool:
    """ASCII digits only ('²'.isdigit() is True, and int('²') fails)."""
    return bool(_DECIMAL.fullmatch(text)) and text[0] not in "+-"


def _cpu(text: str) -> int:
    t = text.strip()
    if not is_number(t):
        raise ValueError(f"{text.strip()!r} is not a CPU number")
    return int(t)


def parse_cpu_list(text: str) -> list[int]:
    """`"0-2,5,7-11:2"` -> `[0, 1, 2, 5, 7, 9, 11]`. Empty or whitespace -> `[]`. Raises ValueError on garbage."""
    cpus: set[int] = set()
    text = text.strip()
    if not text:
        return []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        stride = 1
        if ":" in part:  # kernel group syntax: "0-15:2" (every 2nd) or "0-15:1/4" (used/group)
            part, _, step = part.partition(":")
            used, _, group = step.partition("/")
            if group:
                used_n, group_n = _cpu(used), _cpu(group)
                lo, _, hi = part.partition("-")
                start, end = _cpu(lo), _cpu(hi or lo)
                if end >= MAX_CPUS or group_n < 1 or start > end:
                    raise ValueError(f"bad CPU range {part!r}")
                for base in range(start, end + 1, group_n):
                    cpus.update(c for c in range(base, min(base + used_n, end + 1)))
                continue
            stride = _cpu(step)
        lo, sep, hi = part.partition("-")
        start = _cpu(lo)
        end = _cpu(hi) if sep else start
        if start < 0 or end < start or stride < 1:
            raise ValueError(f"bad CPU range {part!r}")
        if end >= MAX_CPUS:
            raise ValueError(f"CPU {end} is beyond any machine (at most {MAX_CPUS - 1})")
        cpus.update(range(start, end + 1, stride))
    return sorted(cpus)


def format_cpu_list(cpus: Iterable[int]) -> str:
    """`[0, 1, 2, 5]` -> `"0-2,5"` (the kernel's own compact form)."""
    out: list[str] = []
    run: list[int] = []
    for c in sorted(set(cpus)):
        if run and c == run[-1] + 1:
            run.append(c)
            continue
        if run:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
        run = [c]
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(out)


def parse_cpu_mask(text: str) -> list[int]:
    """`/proc/irq/N/smp_affinity` form: comma-separated hex words, most significant first (`"00000000,0000000f"`)."""
    digits = text.strip().replace(",", "")
    if not digits:
        return []
    if not _HEX.fullmatch(digits):
        raise ValueError(f"{text.strip()!r} is not a CPU mask")
    value = int(digits, 16)
    return [i for i in range(value.bit_length()) if value >> i & 1]


def format_cpu_mask(cpus: Iterable[int]) -> str:
    """Inverse of `parse_cpu_mask`, in 32-bit comma-separated words as the kernel prints them."""
    value = 0
    for c in cpus:
        value |= 1 << c
    words = []
    while True:
        words.append(f"{value & 0xFFFFFFFF:08x}")
        value >>= 32
        if not value:
            break
    return ",".join(reversed(words))


def parse_isolcpus(arg: str) -> tuple[list[int], list[str]]:
    """The value of `isolcpus=`: optional flags (`nohz`, `domain`, `managed_irq`) then a CPU list -> (cpus, flags)."""
    flags: list[str] = []
    parts = arg.split(",")
    while parts and parts[0] and parts[0][0] not in "0123456789":
        flags.append(parts.pop(0))
    return parse_cpu_list(",".join(parts)), flags
