"""A real :class:`FileReader` that records what it is asked to read, for tests of what
a read costs (which files a poll opens, how often)."""

from __future__ import annotations

from nodeagent.signals.files import FileReader


class CountingReader(FileReader):
    def __init__(self) -> None:
        super().__init__()
        self.asked: list[str] = []
        """Every path read, in order, repeats included."""

    def read(self, path: str) -> bytes:
        self.asked.append(path)
        return super().read(path)
