"""attest.files.read_bounded: every reader of a file from outside stops at its limit."""

from __future__ import annotations

import os
import threading

import pytest

from attest.files import TooLarge, read_bounded


def test_a_file_at_the_limit_is_read_whole_and_one_byte_more_is_refused(tmp_path):
    path = tmp_path / "evidence.bin"
    path.write_bytes(b"x" * 64)
    assert read_bounded(path, 64) == b"x" * 64
    with pytest.raises(TooLarge, match=r"evidence\.bin is larger than 63 bytes"):
        read_bounded(path, 63)


def test_a_pipe_is_bounded_by_what_is_read_not_by_its_stated_size(tmp_path):
    fifo = tmp_path / "stream"
    os.mkfifo(fifo)

    def feed() -> None:
        try:
            with open(fifo, "wb") as writer:
                writer.write(b"y" * 4096)
        except BrokenPipeError:
            pass  # the reader stopped at its limit and closed its end

    writer = threading.Thread(target=feed)
    writer.start()
    with pytest.raises(TooLarge):
        read_bounded(fifo, 1024)
    writer.join(timeout=10)
    assert not writer.is_alive()


def test_a_missing_file_raises_oserror_for_the_caller_to_word(tmp_path):
    with pytest.raises(FileNotFoundError):
        read_bounded(tmp_path / "absent.pem", 1024)
