"""Where a field is, for the messages that refuse it: ``Pod default/web: spec.containers[0]...``.

Shared by the parser (:mod:`nodeagent.scheduler.objects`) and the API server's rules
(:mod:`nodeagent.scheduler.validation`)."""

from __future__ import annotations

from nodeagent.base.errors import ConfigError


class FieldPath:
    """A field path for error messages: ``Pod default/web: spec.containers[0]...``
    (``what`` may be empty when the path alone says where).

    Every field read makes one (about 55 per pod), and almost none is ever printed, so
    the text is only joined when asked for."""

    __slots__ = ("_parent", "_part", "_path", "what")

    def __init__(self, what: str, path: str = "") -> None:
        self.what = what
        self._path: str | None = path
        self._parent: FieldPath | None = None
        self._part: str | int = ""

    def __truediv__(self, part: str | int) -> FieldPath:
        child = FieldPath.__new__(FieldPath)
        child.what = self.what
        child._path = None
        child._parent = self
        child._part = part
        return child

    @property
    def path(self) -> str:
        if self._path is None:
            assert self._parent is not None
            parent, part = self._parent.path, self._part
            if isinstance(part, int):
                self._path = f"{parent}[{part}]"
            else:
                self._path = f"{parent}.{part}" if parent else part
        return self._path

    def fail(self, value: object, expected: str) -> ConfigError:
        where = f"{self.what}: {self.path}" if self.what else self.path
        return ConfigError(f"{where} = {value!r}: {expected}", field=self.path)
