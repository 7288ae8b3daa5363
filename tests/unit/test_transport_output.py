"""How a command's output, arriving in chunks over the SSH channel, becomes lines (transport.ssh)."""

from __future__ import annotations

from sparkpair.transport import ssh


def test_lines_survive_chunks_split_inside_a_character_and_carriage_returns_end_lines() -> None:
    lines: list[str] = []
    sink = ssh._LineSink(lines.append)
    text = "downloading 1/2 GiB\r\ndownloading 2/2 GiB\rdone: naïve model ✓\n\ntail without newline"
    data = text.encode()
    for start in range(0, len(data), 3):  # 3-byte chunks split 'ï' and '✓' between chunks
        sink.feed(data[start:start + 3])
    sink.flush()
    assert lines == ["downloading 1/2 GiB", "downloading 2/2 GiB", "done: naïve model ✓", "tail without newline"]


def test_bytes_that_are_not_utf8_become_replacement_characters_not_an_error() -> None:
    lines: list[str] = []
    sink = ssh._LineSink(lines.append)
    sink.feed(b"bad \xff\xfe bytes\n")
    assert lines == ["bad \ufffd\ufffd bytes"]
