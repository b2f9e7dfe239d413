"""The records of one file kept by fastfake/store/files.py, in memory.

A table holds the records by name as kept (JSON values): those read from its file
and those learned in this process, at most a bound of bytes (a record past it is
not kept and counted ``full``). The file is read once, at the first lookup
(:meth:`Table.load`); the records learned since are added to it at exit and at
``uninstall()`` (:meth:`Table.flush`). Used by the learned-record store
(fastfake/store/records.py, which adds each record's op and decoded entry) and by
Dynamo's function-name tables (fastfake/store/funcnames.py).
"""
from __future__ import annotations

import atexit
import contextlib
import json
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

from fastfake.store import files as _files


def size_of(name: str, rec: Any) -> int:
    """What a record counts against the bound: its name and its JSON text."""
    return len(name) + len(json.dumps(rec, separators=(",", ":")))


class Table:
    """The records of the file at ``path()`` (its outcomes counted in
    ``file_counts``), at most ``max_bytes()`` bytes of them (read at each use, so
    that the bound can be changed); ``full`` and ``learned`` are counted in
    ``counts``; a record read from the file counts ``loaded_size(name, rec)``."""

    def __init__(self, path: Callable[[], str | None], file_counts: Counter, max_bytes: Callable[[], int],
                 counts: Counter, loaded_size: Callable[[str, Any], int] = size_of) -> None:
        #: name -> the record as kept (JSON values)
        self.records: dict[str, Any] = {}
        #: records learned in this process, not yet written (name -> record)
        self.new: dict[str, Any] = {}
        self.bytes = 0
        self.loaded = False
        self._path = path
        self._file_counts = file_counts
        self._max_bytes = max_bytes
        self._counts = counts
        self._loaded_size = loaded_size
        self._at_exit = False

    def admit(self, name: str, rec: Any) -> bool:
        """Whether a record within the bound is kept (always, here)."""
        return True

    def add(self, name: str, rec: Any, size: int) -> bool:
        if self.bytes + size > self._max_bytes():
            self._counts["full"] += 1
            return False
        if not self.admit(name, rec):
            return False
        self.records[name] = rec
        self.bytes += size
        return True

    def load(self) -> None:
        """Read the file's records into the table."""
        self.loaded = True
        for name, rec in _files.read(self._path(), counter=self._file_counts, max_bytes=self._max_bytes()):
            self.add(name, rec, self._loaded_size(name, rec))

    def learn(self, name: str, rec: Any, size: int) -> bool:
        """Add a record learned in this process, to be written at exit."""
        if not self.add(name, rec, size):
            return False
        self.new[name] = rec
        self._counts["learned"] += 1
        if not self._at_exit:
            self._at_exit = True
            atexit.register(self.flush)
        return True

    def flush(self) -> str | None:
        """Write the records learned since the last write (the outcome, or None when
        there were none)."""
        if not self.new:
            return None
        new = [[n, r] for n, r in self.new.items()]
        self.new.clear()
        return _files.write(new, self._path(), counter=self._file_counts, max_bytes=self._max_bytes())

    def clear(self) -> None:
        """Forget every record in memory (learned or read); the file stays, and is
        read again at the next lookup."""
        self.records.clear()
        self.new.clear()
        self.bytes = 0
        self.loaded = False

    def saved(self) -> tuple:
        return dict(self.records), dict(self.new), self.bytes, self.loaded

    def restore(self, saved: tuple) -> None:
        """Back to :meth:`saved`'s state (on a cleared table)."""
        records, new, self.bytes, self.loaded = saved
        self.records.update(records)
        self.new.update(new)

    @contextlib.contextmanager
    def isolated(self) -> Iterator[None]:
        """Records learned and served in the block only (the self-test): nothing read
        from or written to disk, nothing kept afterwards."""
        saved = self.saved()
        self.clear()
        self.loaded = True
        try:
            yield
        finally:
            self.clear()
            self.restore(saved)
