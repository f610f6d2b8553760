"""An append-only temporary file for what a huge log leaves behind and a report reads back
once (finished tracebacks' exceptions, idle processes' stream records): memory stays bounded
whatever the number of processes. Created on first use, so small logs never touch the disk."""

from __future__ import annotations

import io
import marshal
import tempfile

from vcrash.errors import Fatal


class SpoolFile:
    def __init__(self) -> None:
        self._file = None
        self._size = 0
        self._read_since = False  # a read moved the position away from the end

    def put(self, value) -> tuple[int, int]:
        """Stores a value of builtins (marshal: C speed); returns where it lies."""
        data = marshal.dumps(value)
        try:
            if self._file is None:
                self._file = _temporary_file()
            if self._read_since:
                self._file.seek(self._size)
                self._read_since = False
            self._file.write(data)
        except OSError as exc:  # a full disk under TMPDIR
            raise Fatal(f"cannot write the spool file under {tempfile.gettempdir()}: {exc.strerror or exc} "
                        "(set TMPDIR to a folder with space)") from None
        offset, self._size = self._size, self._size + len(data)
        return offset, len(data)

    def get(self, offset: int, size: int):
        self._file.seek(offset)
        self._read_since = True
        return marshal.loads(self._file.read(size))


def _temporary_file():
    """A temporary file, or memory where none can be made (a read-only TMPDIR): the report
    is worth more than the memory bound."""
    try:
        return tempfile.TemporaryFile(prefix="vcrash-spool-")
    except OSError:
        return io.BytesIO()
