"""ARM cores by name: an arm64 /proc/cpuinfo has no `model name`, only the MIDR fields (`CPU implementer 0x41`,
`CPU part 0xd0b`), so they are decoded here, as util-linux's lscpu does, and CPUs of one kind grouped into clusters
(big.LITTLE: "4x Cortex-A55 + 4x Cortex-A76").

Pure functions over text and numbers; `SystemRoot` reads the files. The part numbers are Arm's and the vendors'
published MIDR values (the same table util-linux, LLVM and the Linux kernel's cputype.h carry), for the cores that
embedded boards ship; an unknown part is shown by its numbers, never guessed.
"""

from __future__ import annotations

from dataclasses import dataclass

IMPLEMENTERS = {
    0x41: "ARM",
    0x42: "Broadcom",
    0x43: "Cavium",
    0x46: "Fujitsu",
    0x48: "HiSilicon",
    0x4E: "NVIDIA",
    0x50: "APM",
    0x51: "Qualcomm",
    0x53: "Samsung",
    0x61: "Apple",
    0xC0: "Ampere",
}

PARTS = {
    0x41: {
        0xC07: "Cortex-A7", 0xC08: "Cortex-A8", 0xC09: "Cortex-A9", 0xC0D: "Cortex-A17", 0xC0F: "Cortex-A15",
        0xD01: "Cortex-A32", 0xD02: "Cortex-A34", 0xD03: "Cortex-A53", 0xD04: "Cortex-A35", 0xD05: "Cortex-A55",
        0xD06: "Cortex-A65", 0xD07: "Cortex-A57", 0xD08: "Cortex-A72", 0xD09: "Cortex-A73", 0xD0A: "Cortex-A75",
        0xD0B: "Cortex-A76", 0xD0C: "Neoverse-N1", 0xD0D: "Cortex-A77", 0xD0E: "Cortex-A76AE", 0xD40: "Neoverse-V1",
        0xD41: "Cortex-A78", 0xD42: "Cortex-A78AE", 0xD43: "Cortex-A65AE", 0xD44: "Cortex-X1", 0xD46: "Cortex-A510",
        0xD47: "Cortex-A710", 0xD48: "Cortex-X2", 0xD49: "Neoverse-N2", 0xD4A: "Neoverse-E1", 0xD4B: "Cortex-A78C",
        0xD4C: "Cortex-X1C", 0xD4D: "Cortex-A715", 0xD4E: "Cortex-X3", 0xD4F: "Neoverse-V2", 0xD80: "Cortex-A520",
        0xD81: "Cortex-A720", 0xD82: "Cortex-X4", 0xD84: "Neoverse-V3", 0xD85: "Cortex-X925", 0xD87: "Cortex-A725",
        0xD8E: "Neoverse-N3",
    },
    0x42: {0x00F: "Brahma-B15", 0x100: "Brahma-B53"},
    0x43: {0x0A1: "ThunderX", 0x0AF: "ThunderX2"},
    0x4E: {0x000: "Denver", 0x003: "Denver 2", 0x004: "Carmel"},
    0x51: {
        0x800: "Kryo 2xx Gold", 0x801: "Kryo 2xx Silver", 0x802: "Kryo 3xx Gold", 0x803: "Kryo 3xx Silver",
        0x804: "Kryo 4xx Gold", 0x805: "Kryo 4xx Silver", 0xC00: "Falkor", 0xC01: "Saphira",
    },
    0x53: {0x001: "Exynos-M1", 0x002: "Exynos-M3", 0x003: "Exynos-M4", 0x004: "Exynos-M5"},
    0x61: {0x022: "Icestorm (M1)", 0x023: "Firestorm (M1)"},
    0xC0: {0xAC3: "Ampere-1", 0xAC4: "Ampere-1a"},
}  # fmt: skip


def _int(text: str | None) -> int | None:
    try:
        return int(text, 0) if text is not None else None
    except ValueError:
        return None


def core_name(implementer: int | None, part: int | None) -> str | None:
    """"Cortex-A76" for (0x41, 0xd0b); "Qualcomm part 0x999" for a known vendor's unknown part; None without both."""
    if implementer is None or part is None:
        return None
    name = PARTS.get(implementer, {}).get(part)
    if name:
        return name
    vendor = IMPLEMENTERS.get(implementer, f"implementer 0x{implementer:02x}")
    return f"{vendor} part 0x{part:03x}"


def cores_from_cpuinfo(text: str) -> dict[int, str]:
    """CPU number -> core name, from an arm64 /proc/cpuinfo (`processor`, `CPU implementer`, `CPU part` per block).
    Empty for an x86 cpuinfo, or one without the MIDR fields."""
    out: dict[int, str] = {}
    for block in text.split("\n\n"):
        fields: dict[str, str] = {}
        for line in block.splitlines():
            key, sep, value = line.partition(":")
            if sep:
                fields[key.strip().lower()] = value.strip()
        cpu = _int(fields.get("processor"))
        name = core_name(_int(fields.get("cpu implementer")), _int(fields.get("cpu part")))
        if cpu is not None and name:
            out[cpu] = name
    return out


@dataclass(frozen=True)
class Cluster:
    """CPUs of one core kind and capacity: on big.LITTLE the little, big (and prime) cores."""

    name: str
    cpus: tuple[int, ...]
    capacity: int | None = None  # the kernel's cpu_capacity (1024 = the biggest), or cpufreq's max kHz, when known

    def to_dict(self) -> dict:
        return {"name": self.name, "cpus": list(self.cpus), "capacity": self.capacity}


# The efficiency cores of big.LITTLE designs: without capacities from the kernel, these are the little ones.
LITTLE = frozenset({
    "Cortex-A7", "Cortex-A32", "Cortex-A34", "Cortex-A35", "Cortex-A53", "Cortex-A55", "Cortex-A510", "Cortex-A520",
    "Kryo 2xx Silver", "Kryo 3xx Silver", "Kryo 4xx Silver", "Icestorm (M1)", "Brahma-B53",
})  # fmt: skip


def clusters(cores: dict[int, str], capacity: dict[int, int] | None = None) -> list[Cluster]:
    """CPUs grouped by (core name, capacity), ordered from the smallest to the biggest: by the kernel's capacity (or
    max frequency) when every CPU has one, else little designs before the others; then by first CPU. Capacity splits
    CPUs of one design that the kernel rates differently (a prime core)."""
    capacity = {c: v for c, v in (capacity or {}).items() if c in cores}
    known = len(capacity) == len(cores)
    groups: dict[tuple[str, int | None], list[int]] = {}
    for cpu in sorted(cores):
        groups.setdefault((cores[cpu], capacity.get(cpu) if known else None), []).append(cpu)
    out = [Cluster(name, tuple(cpus), cap) for (name, cap), cpus in groups.items()]

    def order(c: Cluster) -> tuple:
        return (c.capacity if known else tier(c.name), c.cpus[0])

    return sorted(out, key=order)


def tier(name: str) -> int:
    """Without the kernel's capacities: 0 for a little design, 2 for a prime one (Cortex-X), 1 for the rest."""
    return 0 if name in LITTLE else 2 if name.startswith("Cortex-X") else 1


def summary(groups: list[Cluster]) -> str:
    """ "4x Cortex-A55 + 4x Cortex-A76"; "" for none."""
    return " + ".join(f"{len(c.cpus)}x {c.name}" for c in groups)


def big_cores(groups: list[Cluster]) -> tuple[int, ...] | None:
    """The biggest cluster's CPUs on a big.LITTLE machine (more than one cluster, one of them clearly biggest: by
    capacity, or the only one not of a little design); None otherwise (nothing to choose, or no way to tell)."""
    if len(groups) < 2:
        return None
    rank = (lambda c: c.capacity) if all(c.capacity is not None for c in groups) else (lambda c: tier(c.name))
    top = max(rank(c) for c in groups)
    biggest = [c for c in groups if rank(c) == top]
    return biggest[0].cpus if len(biggest) == 1 and top > min(rank(c) for c in groups) else None
