"""The cache's seal (ADR 0030, `sandboy.cache_seal`): the C BLAKE2b against hashlib's and the Python
stand-in on many inputs, a seal bound to its file's name, and no secret meaning no cache at all."""

from __future__ import annotations

import hashlib
import os
import random

import pytest

from sandboy import cache_seal
from sandboy.confine import _libc, _libc_python, cache_files


def _reference(key: bytes, label: bytes, data: bytes) -> bytes:
    return hashlib.blake2b(len(label).to_bytes(8, "little") + label + data, key=key, digest_size=32).digest()


def _inputs():
    rng = random.Random(14)
    # every length around BLAKE2b's 128-byte blocks (the last block's handling), then random ones
    for n in [*range(0, 300), 1023, 1024, 1025, 65536, 65537, 1 << 20]:
        key = rng.randbytes(rng.choice([1, 16, 32, 63, 64]))
        label = rng.randbytes(rng.randrange(0, 140))
        yield key, label, rng.randbytes(n)


@pytest.mark.skipif(_libc.IMPLEMENTATION != "native", reason="the C executor's extension is not built")
def test_the_c_mac_is_keyed_blake2b_as_hashlib_computes_it():
    from sandboy.confine import _native

    for key, label, data in _inputs():
        assert _native.mac(key, label, data) == _reference(key, label, data), (len(key), len(label), len(data))
    assert _native.mac(b"k", b"", memoryview(b"abc")[1:]) == _reference(b"k", b"", b"bc")  # (any buffer)


def test_the_python_stand_in_gives_the_same_bytes():
    for key, label, data in _inputs():
        assert _libc_python.mac(key, label, data) == _reference(key, label, data)


@pytest.mark.parametrize("key", [b"", bytes(65)])
def test_a_key_out_of_blake2b_range_is_refused(key):
    with pytest.raises(ValueError):
        _libc.mac(key, b"", b"")
    with pytest.raises(ValueError):
        _libc_python.mac(key, b"", b"")


def test_both_implementations_find_the_same_secret_in_the_user_keyring():
    """The real keyring: the C function and the stand-in read the one key (made by whichever was
    first), 32 bytes, the same in a second call."""
    first = _libc.user_key(cache_seal.description(), cache_seal.KEY_PERM)
    if first is None:
        pytest.skip("the kernel's user keyring cannot be used here (keyctl refused)")
    assert len(first) == 32
    assert _libc_python.user_key(cache_seal.description(), cache_seal.KEY_PERM) == first
    assert _libc.user_key(cache_seal.description(), cache_seal.KEY_PERM) == first


@pytest.fixture
def folder(tmp_path):
    if cache_seal.secret() is None:
        pytest.skip("no user keyring here: no seal")
    path = tmp_path / "cache" / "plans"
    return str(path)


def test_a_sealed_file_reads_back_and_anything_else_is_a_miss(folder):
    assert cache_files.write_file(folder, "a.plan", b"the body")
    path = os.path.join(folder, "a.plan")
    assert _libc.read_private(path, 100) == b"the body"
    sealed = open(path, "rb").read()
    assert sealed[32:] == b"the body" and len(sealed) == 32 + 8
    for i in range(len(sealed)):  # any one bit of tag or body changed
        with open(path, "wb") as fh:
            fh.write(sealed[:i] + bytes([sealed[i] ^ 1]) + sealed[i + 1:])
        assert _libc.read_private(path, 100) is None, i
    for forged in (b"the body", b"", sealed[:31], sealed + b"x"):
        with open(path, "wb") as fh:
            fh.write(forged)
        assert _libc.read_private(path, 100) is None, forged
    with open(path, "wb") as fh:
        fh.write(sealed)
    assert _libc.read_private(path, 100) == b"the body"  # (the twin: the same bytes back)
    assert _libc.read_private(path, 7) is None  # the limit is the body's


@pytest.mark.parametrize("other", ["b.plan", "../walks/a.plan", "../policies/a.plan"])
def test_a_sealed_file_copied_under_another_name_or_kind_is_a_miss(folder, other):
    assert cache_files.write_file(folder, "a.plan", b"the body")
    target = os.path.normpath(os.path.join(folder, other))
    os.makedirs(os.path.dirname(target), mode=0o700, exist_ok=True)
    with open(os.path.join(folder, "a.plan"), "rb") as src, open(target, "wb") as dst:
        dst.write(src.read())
    assert _libc.read_private(target, 100) is None
    assert cache_seal.unseal(os.path.join(folder, "a.plan"), open(target, "rb").read()) == b"the body"


def test_without_a_secret_nothing_is_written_or_read(folder, monkeypatch):
    """Where the keyring cannot be used (a container's seccomp refuses keyctl) no file can be
    trusted: none is read, none written — the cache is off, and `sandboy doctor` says so."""
    assert cache_files.write_file(folder, "a.plan", b"the body")
    monkeypatch.setattr(cache_seal, "_SECRET", [None])
    assert _libc.read_private(os.path.join(folder, "a.plan"), 100) is None
    assert not cache_files.write_file(folder, "b.plan", b"the body")
    assert not os.path.exists(os.path.join(folder, "b.plan"))
    assert cache_seal.status().startswith("off:")
