"""The channel's reader trusts nothing it decodes (autotune/sandbox/channel.py, schema.py): each forged frame the
attackers sent (issue 17) ends as a protocol error, never an exception, a crash or a memory blow-up in the parent.

Frames go through a real pipe into a real Reader, as from a child; no child process is started (milliseconds each).
"""

import io
import os
import struct
import threading
import zipfile

import pytest
import torch

from autotune.sandbox import channel
from autotune.sandbox.channel import Reader, encode
from autotune.sandbox.schema import (ERROR_CHARS, DictOf, Either, Int, ListOf, ProtocolError, Schema, Text,
                                     check_frame, runner_schemas)


def read_all(frames: list[bytes], on_event=None, schemas=None) -> Reader:
    """Send these raw frames (each with its length header) through a pipe to a Reader; the finished Reader."""
    r, w = os.pipe()
    reader = Reader(r, on_event, lambda: None, schemas=schemas)
    reader.start()

    def send():
        for f in frames:
            channel.write_all(w, f)
        os.close(w)

    writer = threading.Thread(target=send)
    writer.start()
    writer.join(60)
    reader.join(60)
    return reader


def framed(data: bytes) -> bytes:
    return struct.pack("<Q", len(data)) + data


def with_pickle(pickle: bytes) -> bytes:
    """A torch.save archive whose data.pkl is replaced by `pickle`."""
    plain = zipfile.ZipFile(io.BytesIO(encode({"kind": "x"})[8:]))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        for name in plain.namelist():
            z.writestr(name, pickle if name.endswith("data.pkl") else plain.read(name))
    return framed(out.getvalue())


def deep_tuple_key(depth: int) -> bytes:
    # {("(((None,),),)..."): 1}: hashing a key this deep overflows the C stack inside torch.load (SIGSEGV, measured)
    return b"\x80\x02}" + b"N" + b"\x85" * depth + b"K\x01s."


def test_an_honest_frame_arrives_as_sent():
    frame = {"kind": "case_result", "index": 3, "outputs": [torch.arange(6.0).view(2, 3), None],
             "aliased": [(0, 1)], "torch_ops": {"aten.empty": 2}, "note": "x" * 100}
    reader = read_all([encode(frame)])
    assert reader.error == ""
    got = reader.frames[0]
    assert torch.equal(got["outputs"][0], frame["outputs"][0]) and got["aliased"] == [(0, 1)]


FORGED = {
    "a plain pickle": (framed(b"\x80\x04\x95\x05\x00\x00\x00\x00\x00\x00\x00}\x94."), "not a zip archive"),
    "torch's legacy format": (None, "not a zip archive"),
    "a tuple key nested 10^6 deep": (with_pickle(deep_tuple_key(1_000_000)), "nested more than 64 deep"),
    "a list nested 50,000 deep": (with_pickle(b"\x80\x02" + b"]" * 50_000 + b"a" * 49_999 + b"."),
                                  "nested more than 64 deep"),
    "a list nested 20 deep (within the pickle scan)": (None, "nested more than 16 deep"),
    "an opcode the unpickler does not run": (with_pickle(b"\x80\x02}0."), "does not run (POP)"),
    "a deflated entry (a decompression bomb)": (None, "stored compressed"),
    "a stride-0 view of 10^9 elements over 4 bytes": (None, "over a storage of 4 bytes"),
    "a 2040-bit integer": (with_pickle(b"\x80\x02}X\x04\x00\x00\x00kindX\x01\x00\x00\x00xsX\x01\x00\x00\x00n"
                                       b"\x8a\xff" + b"\x01" * 255 + b"s."), "outside the 64-bit range"),
    "a list, not a dict": (framed(encode([1, 2])[8:]), "must be a dict"),
    "a truncated archive": (framed(encode({"kind": "x", "t": torch.ones(100)})[8:-300]), "malformed archive"),
}


def _forged(name: str) -> bytes:
    frame, _ = FORGED[name]
    if frame is not None:
        return frame
    if name == "torch's legacy format":
        buf = io.BytesIO()
        torch.save({"kind": "x"}, buf, _use_new_zipfile_serialization=False)
        return framed(buf.getvalue())
    if name.startswith("a list nested 20"):
        nested = "leaf"
        for _ in range(20):
            nested = [nested]
        return encode({"kind": "x", "v": nested})
    if name.startswith("a deflated"):
        plain = zipfile.ZipFile(io.BytesIO(encode({"kind": "x", "t": torch.zeros(1 << 20)})[8:]))
        out = io.BytesIO()
        with zipfile.ZipFile(out, "w") as z:
            for n in plain.namelist():
                z.writestr(n, plain.read(n), compress_type=zipfile.ZIP_DEFLATED if "/data/" in n else zipfile.ZIP_STORED)
        return framed(out.getvalue())
    return encode({"kind": "x", "t": torch.zeros(1).expand(10**9)})  # saved as its 4-byte storage


@pytest.mark.parametrize("name", list(FORGED))
def test_a_forged_frame_is_a_protocol_error(name):
    seen = []
    reader = read_all([_forged(name), encode({"kind": "after"})], on_event=seen.append)
    assert FORGED[name][1] in reader.error, reader.error
    assert reader.error.startswith("malformed result frame") and seen == []  # nothing after it is trusted


def test_a_flood_of_large_error_frames_keeps_one_short_text():
    large = encode({"kind": "error", "error": "E" * (512 << 10)})
    reader = read_all([large] * 14, on_event=lambda f: False)
    assert reader.error == ""
    errors = [f for f in reader.frames if f["kind"] == "error"]
    assert len(errors) == 1 and len(errors[0]["error"]) <= ERROR_CHARS + 20
    reader = read_all([encode({"kind": "error", "error": "E" * (10 << 20)})] * 2, on_event=lambda f: False)
    assert "a string of 10485760 characters" in reader.error  # the attackers' 10 MiB frames


def test_a_flood_of_small_frames_is_a_protocol_error(monkeypatch):
    monkeypatch.setattr(channel, "KEEP_FRAMES", 50)
    reader = read_all([encode({"kind": "step"})] * 60, on_event=lambda f: False)
    assert "more than 50 frames" in reader.error


def test_a_handler_that_raises_is_a_protocol_error_not_a_crash():
    def on_event(frame):
        raise KeyError("index")

    reader = read_all([encode({"kind": "case_start"})], on_event=on_event)
    assert "the parent failed to handle a frame (KeyError" in reader.error


CASE = Schema("case_start", {"index": Int(0, 1000)})
FAILED = Schema("case_error", {"index": int, "error": Text(100), "compile": bool}, keep="first")


@pytest.mark.parametrize("frame, fragment", [
    ({"kind": "case_start", "index": -1}, "is not an integer in [0, 1000]"),
    ({"kind": "case_start", "index": True}, "is not an integer"),
    ({"kind": "case_start"}, "without its field 'index'"),
    ({"kind": "case_start", "index": 1, "extra": 2}, "fields not in its schema: extra"),
    ({"kind": "surprise"}, "a kind that has no schema"),
    ({"kind": "case_error", "index": 1, "error": ["x"], "compile": False}, "case_error.error: a list of 1 is not"),
])
def test_a_frame_off_its_schema_is_refused(frame, fragment):
    with pytest.raises(ProtocolError, match=None) as e:
        check_frame(frame, {**runner_schemas(), "case_start": CASE, "case_error": FAILED})
    assert fragment in str(e.value)


def test_schemas_check_types_and_truncate_texts():
    table = {**runner_schemas(), "case_error": FAILED}
    got = check_frame({"kind": "case_error", "index": 2, "error": "x" * 500, "compile": True}, table)
    assert got["error"] == "x" * 100 + " [truncated]"
    nested = Schema("r", {"pairs": ListOf(ListOf(int, max_len=2)), "ops": DictOf(str, int), "t": Either(None, torch.Tensor)})
    assert nested.check({"kind": "r", "pairs": [[1, 2]], "ops": {"a": 1}, "t": None})["pairs"] == [[1, 2]]
    with pytest.raises(ProtocolError, match="at most 2"):
        nested.check({"kind": "r", "pairs": [[1, 2, 3]], "ops": {}, "t": None})


def test_only_the_first_frame_of_a_keep_first_kind_is_kept():
    frames = [encode({"kind": "case_error", "index": i, "error": "boom", "compile": False}) for i in range(3)]
    reader = read_all(frames, schemas={**runner_schemas(), "case_error": FAILED})
    assert reader.error == "" and [f["index"] for f in reader.frames] == [0]
