"""`cage.fixed_tmp_dir`'s decisions, without the cage (ADR 0028, session 12): `sandboy run`'s `{tmp}`
mount point `$TMPDIR/sandboy-tmp-EUID` is taken only where it is a directory of this euid's, mode
0700, not a symlink, and empty — anything else there (planted by another user of a shared /tmp, or
by an earlier command) gives None, and the caller makes a directory per cage as before. The
end-to-end probes (a planted or linked mount point is a miss and not taken, from the host side)
are in test_plan_cache_tmp.py; these need no Landlock nor namespaces.
"""

import os
import time

import pytest

from sandboy.confine import cage


@pytest.fixture
def mount_point(tmp_path, monkeypatch):
    """Where fixed_tmp_dir looks first ($TMPDIR = a temp directory of this test's own)."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    return tmp_path / cage.FIXED_TMP_NAME.format(euid=os.geteuid())


def test_made_when_missing_and_taken_again_while_empty(mount_point):
    before = time.time_ns()
    path, st, now = cage.fixed_tmp_dir()
    assert path == str(mount_point) and mount_point.is_dir() and not mount_point.is_symlink()
    assert (mount_point.stat().st_mode & 0o777) == 0o700 and st.st_uid == os.geteuid()
    assert (st.st_dev, st.st_ino) == (mount_point.lstat().st_dev, mount_point.lstat().st_ino)
    assert before <= now <= time.time_ns()  # the clock before the lstat (a hit's `ctime_settled` asks it)
    again = cage.fixed_tmp_dir()
    assert again is not None and again[0] == path and again[1].st_ino == st.st_ino


@pytest.mark.parametrize("planted", ["a file in it", "mode 0755", "a symlink to an empty 0700 directory",
                                     "a regular file", "another user's"])
def test_anything_but_our_empty_private_directory_is_not_taken(mount_point, tmp_path, planted):
    """Each is left as it was found (never emptied nor removed: not ours to touch)."""
    if planted == "a file in it":
        mount_point.mkdir(mode=0o700)
        (mount_point / "left").write_text("x")
    elif planted == "mode 0755":
        mount_point.mkdir()
        mount_point.chmod(0o755)
    elif planted == "a symlink to an empty 0700 directory":
        (tmp_path / "elsewhere").mkdir(mode=0o700)
        mount_point.symlink_to(tmp_path / "elsewhere")
    elif planted == "a regular file":
        mount_point.write_text("")
        mount_point.chmod(0o700)  # (its mode right: only its type refuses it)
    else:
        if os.geteuid() != 0:
            pytest.skip("making a directory of another user's needs root")
        mount_point.mkdir(mode=0o700)
        os.chown(mount_point, 65534, 65534)
    found = mount_point.lstat()
    assert cage.fixed_tmp_dir() is None
    now = mount_point.lstat()
    assert (now.st_ino, now.st_mode, now.st_uid, now.st_ctime_ns) == (found.st_ino, found.st_mode, found.st_uid,
                                                                       found.st_ctime_ns)
