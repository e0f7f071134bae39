"""The one place edge_runtime reads the system: /proc and /sys, through one root prefix (the actions on this process,
pinning and scheduling, are in process.py and always act on the live system).

Reads go through `SystemRoot(root)`, so a board's captured tree can be inspected anywhere and tests use fake trees
(`--sysroot DIR`). Every read is tolerant: a missing or unreadable file gives the fallback, never an exception.
`/proc/self` is never redirected, as DESIGN.md says: what a process reads about itself is always itself.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from edge_runtime.system.cpulist import is_number, parse_cpu_list, parse_isolcpus

# /proc/interrupts of a 256-CPU machine is about 1 MB; nothing we read from /proc or /sys comes near this.
MAX_READ_BYTES = 16 << 20


class SystemRoot:
    """Observed system state, read below `root` (default `/`)."""

    def __init__(self, root: str | os.PathLike[str] = "/"):
        self.root = Path(root)

    @property
    def is_live(self) -> bool:
        """True when this root is the running system itself (`/`), not a captured tree."""
        try:
            return self.root.resolve() == Path("/")
        except OSError:
            return False

    def path(self, rel: str) -> Path:
        return self.root / rel.lstrip("/")

    def read(self, rel: str, fallback: str | None = None) -> str | None:
        """Text of a file with trailing whitespace stripped, or `fallback` when it is missing or unreadable."""
        raw = self.read_bytes(rel)
        return fallback if raw is None else raw.decode(errors="replace").rstrip("\n\x00 ")

    def read_bytes(self, rel: str) -> bytes | None:
        """Bytes of a regular file (procfs, sysfs and device-tree files are), or None. A fifo, a device or a link to
        /dev/zero in a hostile tree is not read: opened non-blocking and checked first, and reads are bounded."""
        try:
            fd = os.open(self.path(rel), os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except (OSError, ValueError):
            return None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return None
            chunks, size = [], 0
            while size <= MAX_READ_BYTES:
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    return b"".join(chunks)
                chunks.append(chunk)
                size += len(chunk)
            return None  # larger than any file the kernel gives us: garbled
        except OSError:
            return None
        finally:
            os.close(fd)

    def cpus(self, which: str) -> list[int] | None:
        """`online`, `possible`, `present`, `isolated`, `offline` from /sys/devices/system/cpu; None if unreadable."""
        text = self.read(f"/sys/devices/system/cpu/{which}")
        if text is None:
            return None
        try:
            return parse_cpu_list(text)
        except ValueError:
            return None  # garbled: treat as unknown rather than guess

    def online_cpus(self) -> list[int]:
        online = self.cpus("online")
        if online is not None:
            return online
        return list(range(os.cpu_count() or 1)) if self.is_live else []

    def cmdline(self) -> str:
        return self.read("/proc/cmdline", "") or ""

    def cmdline_args(self) -> dict[str, str]:
        args: dict[str, str] = {}
        for word in self.cmdline().split():
            key, _, value = word.partition("=")
            args[key] = value
        return args

    def isolation(self) -> dict[str, list[int]]:
        """CPUs set apart on the kernel command line and in sysfs (kernel-parameters.txt: isolcpus, nohz_full...)."""
        args = self.cmdline_args()
        out: dict = {}
        garbled: dict[str, str] = {}
        for key in ("isolcpus", "nohz_full", "rcu_nocbs", "irqaffinity"):
            if key in args:
                try:
                    out[key] = parse_isolcpus(args[key])[0] if key == "isolcpus" else parse_cpu_list(args[key])
                except ValueError:
                    garbled[key] = args[key]  # not a CPU list: unknown, said so, not an empty list
        out["sysfs_isolated"] = self.cpus("isolated") or []
        if garbled:
            out["garbled"] = garbled
        return out

    def kernel(self) -> str:
        return self.read("/proc/sys/kernel/osrelease", "") or ""

    def cpu_cores(self) -> dict[int, str]:
        """CPU -> core name decoded from an arm64 /proc/cpuinfo's implementer and part ({} on x86)."""
        from edge_runtime.system.armcpu import cores_from_cpuinfo

        return cores_from_cpuinfo(self.read("/proc/cpuinfo", "") or "")

    def cpu_clusters(self) -> list:
        """The ARM cores grouped by kind and capacity (`armcpu.Cluster`, smallest first); [] on x86. Capacity from
        the kernel's cpu_capacity, else cpufreq's cpuinfo_max_freq."""
        from edge_runtime.system.armcpu import clusters

        cores = self.cpu_cores()
        capacity: dict[int, int] = {}
        for cpu in cores:
            for rel in (f"cpu{cpu}/cpu_capacity", f"cpu{cpu}/cpufreq/cpuinfo_max_freq"):
                value = self.read(f"/sys/devices/system/cpu/{rel}", None)
                if value is not None and value.strip().isdigit():
                    capacity[cpu] = int(value.strip())
                    break
        return clusters(cores, capacity)

    def cpu_model(self) -> str:
        text = self.read("/proc/cpuinfo", "") or ""
        from edge_runtime.system.armcpu import summary

        arm = summary(self.cpu_clusters())
        if arm:  # "4x Cortex-A55 + 4x Cortex-A76": arm64 has no model name (a Pi's "Hardware" names another SoC)
            return arm
        fields: dict[str, str] = {}
        for line in text.splitlines():
            key, sep, value = line.partition(":")
            if sep:
                fields.setdefault(key.strip().lower(), value.strip())
        for key in ("model name", "hardware", "model", "cpu model", "processor"):
            if fields.get(key) and not is_number(fields[key]):
                return fields[key]
        return ""

    def cpu_flags(self) -> set[str]:
        """Feature flags of the first CPU in /proc/cpuinfo: x86 `flags`, ARM `Features`; empty when unknown."""
        for line in (self.read("/proc/cpuinfo", "") or "").splitlines():
            if line.startswith(("flags", "Features")):
                return set(line.split(":", 1)[1].split())
        return set()

    def device_tree(self, name: str) -> list[str]:
        """A device-tree property as its NUL-separated strings (`model`, `compatible`), from /proc/device-tree or
        /sys/firmware/devicetree/base; [] when there is none."""
        raw = self.read_bytes(f"/proc/device-tree/{name}") or self.read_bytes(f"/sys/firmware/devicetree/base/{name}")
        return [s.decode(errors="replace").strip() for s in (raw or b"").split(b"\x00") if s.strip()]

    def board_model(self) -> str:
        """Device-tree `model` on ARM boards, DMI vendor and product on x86; "" when neither is there."""
        model = self.device_tree("model")
        if model:
            return model[0]
        vendor = self.read("/sys/class/dmi/id/sys_vendor", "") or ""
        product = self.read("/sys/class/dmi/id/product_name", "") or ""
        return " ".join(p for p in (vendor.strip(), product.strip()) if p)

    def firmware(self) -> str:
        """The board's firmware: DMI's BIOS vendor, version and date (x86, and arm64 boards booting UEFI), else the
        boot loader the device tree names (U-Boot's `chosen/u-boot,version`); "" when neither says."""
        dmi = [(self.read(f"/sys/class/dmi/id/bios_{k}", "") or "").strip() for k in ("vendor", "version", "date")]
        if dmi[1]:
            return " ".join(p for p in dmi[:2] if p) + (f" ({dmi[2]})" if dmi[2] else "")
        loader = self.device_tree("chosen/u-boot,version")
        return loader[0] if loader else ""

    def irq_affinities(self) -> dict[str, list[int]]:
        """IRQ number -> CPUs it may be delivered to (/proc/irq/N/smp_affinity_list, else the smp_affinity mask)."""
        from edge_runtime.system.cpulist import parse_cpu_mask

        out: dict[str, list[int]] = {}
        base = self.path("/proc/irq")
        try:
            entries = sorted((e for e in base.iterdir() if is_number(e.name)), key=lambda e: int(e.name))
        except OSError:
            return out
        for e in entries:
            text = self.read(f"/proc/irq/{e.name}/smp_affinity_list")
            try:
                if text is not None:
                    out[e.name] = parse_cpu_list(text)
                    continue
                mask = self.read(f"/proc/irq/{e.name}/smp_affinity")
                if mask is not None:
                    out[e.name] = parse_cpu_mask(mask)
            except ValueError:
                continue  # garbled: unknown rather than guessed
        return out

    def governors(self) -> dict[int, str]:
        out = {}
        for cpu in self.online_cpus():
            gov = self.read(f"/sys/devices/system/cpu/cpu{cpu}/cpufreq/scaling_governor")
            if gov:
                out[cpu] = gov
        return out
