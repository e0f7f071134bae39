"""Plugins by name, imported on first use: the shape of the backend registry (edge_runtime.runtime.backends) and of
the host's target registry (bench.targets.registry). Built-ins are registered as "module:Class" strings and imported
when first asked for; third-party plugins register through an entry-point group (name = "module:Class"), read only
when a name is not a built-in one; a name registered twice is an error, and so is a plugin that cannot be imported or
is not of the registry's kind (one line each, naming the plugin).

Never: import a plugin's module, or importlib.metadata, at import time (`import edge_runtime` pays for neither).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Generic, TypeVar

from edge_runtime.errors import UserError

T = TypeVar("T")


class LazyRegistry(Generic[T]):
    """name -> plugin class. `what` names an entry in messages ("backend", "target scheme"); `fits(name, cls)` says
    whether a class may serve `name`, and `kind` what it must be when it may not ("a ... Backend")."""

    def __init__(self, what: str, group: str, fits: Callable[[str, type], bool], kind: str) -> None:
        self.what, self.group, self.fits, self.kind = what, group, fits, kind
        self.items: dict[str, str | type[T]] = {}
        self._entry_points_loaded = False

    def register(self, name: str, plugin: str | type[T]) -> None:
        """Register a class (or a lazy "module:Class") under `name`; a name taken is a ValueError (a programming
        mistake; one taken by an installed plugin is the user's to fix, a UserError, see load_entry_points)."""
        if name in self.items:
            raise ValueError(f"{self.what} {name!r} is already registered ({spelled(self.items[name])})")
        self.items[name] = plugin

    def load_entry_points(self) -> None:
        """The group's plugins, registered once per process."""
        if self._entry_points_loaded:
            return
        self._entry_points_loaded = True
        from importlib.metadata import entry_points  # here, not at import: email, zipfile, csv, ast (~25 ms)

        for ep in entry_points(group=self.group):
            try:
                self.register(ep.name, ep.value)
            except ValueError:  # a plugin that takes a name already taken: the user's installation to fix
                dist = getattr(ep.dist, "name", None) or "a package"
                taken = spelled(self.items[ep.name])
                raise UserError(f"{self.what} {ep.name!r}: {dist} registers {ep.value}, but it is {taken}'s",
                                hint="uninstall one of the two") from None

    def names(self) -> list[str]:
        """Every name, built-in and entry points, in the order registered."""
        self.load_entry_points()
        return list(self.items)

    def get(self, name: str) -> type[T] | None:
        """The class registered as `name`, its module imported now, or None if nobody registered it. A built-in name
        needs no entry-point scan (a plugin cannot take a built-in's name anyway)."""
        if name not in self.items:
            self.load_entry_points()
        plugin = self.items.get(name)
        if plugin is None or not isinstance(plugin, str):
            return plugin
        module, _, attr = plugin.partition(":")
        try:
            cls = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as err:  # a plugin installed without what it needs
            raise UserError(f"{self.what} {name!r}: {plugin} cannot be loaded ({type(err).__name__}: {err})") from None
        if not (isinstance(cls, type) and self.fits(name, cls)):
            raise UserError(f"{self.what} {name!r}: {plugin} is not {self.kind}")
        self.items[name] = cls
        return cls

    def spelled(self) -> dict[str, str]:
        """name -> "module:Class", built-in and entry points, nothing imported."""
        return {n: spelled(self.items[n]) for n in self.names()}


def spelled(plugin: str | type) -> str:
    """A plugin as "module:Class", registered as a string or already imported."""
    return plugin if isinstance(plugin, str) else f"{plugin.__module__}:{plugin.__qualname__}"
