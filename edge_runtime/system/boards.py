"""Board profiles (boards/*.toml): how to recognise a board, its CPU layout, thermal limits, NPU paths and where its
kernel command line lives. Loaded into typed records; unknown keys warn; errors name the file, the key and what was
expected. Detection reads the device tree and DMI through the one system root.
"""

from __future__ import annotations

import fnmatch
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from edge_runtime.errors import UserError
from edge_runtime.files.inputs import check_input
from edge_runtime.files.toml import Where, check_keys, read_toml, table
from edge_runtime.system.cpulist import MAX_CPUS
from edge_runtime.system.data import data_dir
from edge_runtime.system.root import SystemRoot
from edge_runtime.system.thermal import SILICON_RANGE_C

MAX_PROFILE_BYTES = 1 << 20  # a profile is a page of TOML


class BoardProfileError(UserError):
    """A board profile that cannot be used: the message names the file and the key."""


class BoardProfileWarning(UserWarning):
    """Something in a board profile that is ignored (an unknown key)."""


@dataclass(frozen=True)
class Cluster:
    name: str
    cpus: tuple[int, ...]
    big: bool = False


@dataclass(frozen=True)
class Detect:
    compatible: tuple[str, ...] = ()
    model: tuple[str, ...] = ()
    dmi_vendor: tuple[str, ...] = ()
    dmi_product: tuple[str, ...] = ()
    cpu_vendor: tuple[str, ...] = ()


@dataclass(frozen=True)
class Cpus:
    clusters: tuple[Cluster, ...] = ()
    isolate: tuple[int, ...] = ()
    housekeeping: tuple[int, ...] = ()


@dataclass(frozen=True)
class Thermal:
    zones: tuple[str, ...] = ()
    limit_c: float | None = None
    critical_c: float | None = None


@dataclass(frozen=True)
class Npu:
    kind: str = "none"
    tflite_delegate: str = ""
    onnxruntime_device: str = ""
    openvino_device: str = ""
    runtime: str = ""


@dataclass(frozen=True)
class Cmdline:
    file: str = ""
    how: str = ""


@dataclass(frozen=True)
class BoardProfile:
    name: str
    description: str
    arch: str
    path: Path
    detect: Detect = field(default_factory=Detect)
    cpus: Cpus = field(default_factory=Cpus)
    thermal: Thermal = field(default_factory=Thermal)
    npu: Npu = field(default_factory=Npu)
    cmdline: Cmdline = field(default_factory=Cmdline)

    def suggested_isolated(self, online: list[int]) -> list[int]:
        """The profile's CPUs to isolate that are online here; for a generic profile, the last online CPU."""
        if not online:  # not known (a captured tree without sysfs): trust the profile
            return list(self.cpus.isolate)
        chosen = [c for c in self.cpus.isolate if c in online]
        if chosen or self.cpus.isolate:
            return chosen
        return online[-1:] if len(online) > 1 else []


# Schema: section -> key -> (type, description). Top-level keys under "".
_SCHEMA: dict[str, dict[str, tuple[type, str]]] = {
    "": {"name": (str, "a string"), "description": (str, "a string"), "arch": (str, "a string")},
    "detect": {
        k: (list, "a list of strings") for k in ("compatible", "model", "dmi_vendor", "dmi_product", "cpu_vendor")
    },
    "cpus": {
        "clusters": (list, "a list of {name, cpus, big}"),
        "isolate": (list, "a list of CPU numbers"),
        "housekeeping": (list, "a list of CPU numbers"),
    },
    "thermal": {
        "zones": (list, "a list of zone types"),
        "limit_c": (float, "degrees C"),
        "critical_c": (float, "degrees C"),
    },
    "npu": {
        k: (str, "a string") for k in ("kind", "tflite_delegate", "onnxruntime_device", "openvino_device", "runtime")
    },
    "cmdline": {"file": (str, "a string"), "how": (str, "a string")},
}
_NPU_KINDS = ("none", "npu", "gpu", "dsp")


def _cpu_number(c) -> bool:
    return isinstance(c, int) and not isinstance(c, bool) and 0 <= c < MAX_CPUS


def _check(where: Where, section: str, key: str, value, kind: type, what: str):
    at = f"{where}: {section + '.' if section else ''}{key}"
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise BoardProfileError(f"{at} = {value!r}: expected {what}")
    if kind is float and not (SILICON_RANGE_C[0] <= value <= SILICON_RANGE_C[1]):  # NaN fails both
        lo, hi = SILICON_RANGE_C
        raise BoardProfileError(f"{at} = {value!r}: expected degrees C from {lo:g} to {hi:g}")
    if kind is list and key in ("isolate", "housekeeping"):
        if not all(_cpu_number(c) for c in value):
            raise BoardProfileError(f"{at} = {value!r}: expected {what} (0 to {MAX_CPUS - 1})")
    elif kind is list and key != "clusters" and not all(isinstance(s, str) for s in value):
        raise BoardProfileError(f"{at} = {value!r}: expected {what}")
    return value


def load_profile(path: str | os.PathLike[str]) -> BoardProfile:
    path = Path(path)
    where = Where(f"board profile {path.name}", error=BoardProfileError, warning=BoardProfileWarning)
    data = read_toml(path, where, "board profile", max_bytes=MAX_PROFILE_BYTES)
    # Unknown keys and typos warn (a profile of a newer release still detects its board); a bad value is an error.
    check_keys(where, "the top level", data, {*_SCHEMA[""], *_SCHEMA.keys() - {""}}, typos="warn")
    values: dict[str, dict] = {}
    for section, schema in _SCHEMA.items():
        given = table(where, data, section, schema, typos="warn") if section else data
        values[section] = {k: _check(where, section, k, v, *schema[k]) for k, v in given.items() if k in schema}
    where.warn_the_rest()
    for key in ("name", "description", "arch"):
        if key not in values[""]:
            raise BoardProfileError(f"{where}: missing {key}")
    if values[""]["name"] != path.stem:
        raise BoardProfileError(f"{where}: name = {values['']['name']!r} must match the file name")
    clusters = []
    for i, c in enumerate(values["cpus"].get("clusters", [])):
        if not isinstance(c, dict) or not isinstance(c.get("cpus"), list):
            raise BoardProfileError(
                f"{where}: cpus.clusters[{i}] = {c!r}: expected {{ name = ..., cpus = [...] }}"
            )
        if not all(_cpu_number(x) for x in c["cpus"]):
            raise BoardProfileError(
                f"{where}: cpus.clusters[{i}].cpus = {c['cpus']!r}: expected CPU numbers "
                f"(0 to {MAX_CPUS - 1})"
            )
        clusters.append(Cluster(str(c.get("name", f"cluster{i}")), tuple(c["cpus"]), bool(c.get("big", False))))
    npu = values["npu"]
    if npu.get("kind", "none") not in _NPU_KINDS:
        raise BoardProfileError(
            f"{where}: npu.kind = {npu['kind']!r}: expected one of {', '.join(_NPU_KINDS)}"
        )
    cpus = values["cpus"]
    overlap = set(cpus.get("isolate", [])) & set(cpus.get("housekeeping", []))
    if overlap:
        raise BoardProfileError(
            f"{where}: cpus.isolate and cpus.housekeeping share CPU {sorted(overlap)}"
        )
    return BoardProfile(
        name=values[""]["name"],
        description=values[""]["description"],
        arch=values[""]["arch"],
        path=path,
        detect=Detect(**{k: tuple(v) for k, v in values["detect"].items()}),
        cpus=Cpus(tuple(clusters), tuple(cpus.get("isolate", [])), tuple(cpus.get("housekeeping", []))),
        thermal=Thermal(
            tuple(values["thermal"].get("zones", [])),
            values["thermal"].get("limit_c"),
            values["thermal"].get("critical_c"),
        ),
        npu=Npu(**npu),
        cmdline=Cmdline(**values["cmdline"]),
    )


def boards_dir() -> Path:
    """The profiles the package carries (system/data.py), or EDGE_RUNTIME_BOARDS, which must be a directory (a
    mistyped variable would otherwise mean "no profile" without a word)."""
    env = os.environ.get("EDGE_RUNTIME_BOARDS")
    if not env:
        return data_dir("boards")
    check_input(env, "EDGE_RUNTIME_BOARDS", error=BoardProfileError, directory=True)
    return Path(env)


def load_all(directory: Path | None = None) -> list[BoardProfile]:
    """Every profile in boards/; one that does not load is skipped with a warning naming it, not fatal here.

    Read once per directory and process: profiles do not change while a command runs."""
    d = directory or boards_dir()
    key = str(d)
    if key not in _LOADED:
        _LOADED[key] = _load_all(d)
    return list(_LOADED[key])


_LOADED: dict[str, list[BoardProfile]] = {}


def _load_all(d: Path) -> list[BoardProfile]:
    out = []
    for p in sorted(d.glob("*.toml")):
        if p.name.startswith("."):
            continue
        try:
            out.append(load_profile(p))
        except BoardProfileError as err:
            warnings.warn(f"{err.message} (profile skipped)", BoardProfileWarning, stacklevel=2)
    return out


def detect(root: SystemRoot, profiles: list[BoardProfile] | None = None) -> BoardProfile | None:
    """The profile whose device-tree compatible or model, or DMI vendor/product, matches; generic ones last."""
    profiles = profiles if profiles is not None else load_all()
    compatible = root.device_tree("compatible")
    model = (root.device_tree("model") or [""])[0]
    vendor = (root.read("/sys/class/dmi/id/sys_vendor", "") or "").strip()
    product = (root.read("/sys/class/dmi/id/product_name", "") or "").strip()
    cpuinfo = root.read("/proc/cpuinfo", "") or ""

    def specific(p: BoardProfile) -> bool:
        d = p.detect
        if any(c in compatible for c in d.compatible):
            return True
        if model and any(model.startswith(m) for m in d.model):
            return True
        return (
            bool(vendor)
            and any(fnmatch.fnmatch(vendor, v) for v in d.dmi_vendor if v != "*")
            and (not d.dmi_product or any(fnmatch.fnmatch(product, x) for x in d.dmi_product))
        )

    def generic(p: BoardProfile) -> bool:
        d = p.detect
        if compatible:
            return False  # a device-tree board is not a PC
        if "*" in d.dmi_vendor and (vendor or product):
            return True
        return any(f"vendor_id\t: {v}" in cpuinfo for v in d.cpu_vendor)

    for test in (specific, generic):
        for p in profiles:
            if test(p):
                return p
    return None
