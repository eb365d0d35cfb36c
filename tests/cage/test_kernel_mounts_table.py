"""`kernel_mounts.below` read against written mount tables (no kernel): which mounts below a
write root are the kernel's own, escaped mount points, a mount equal to a root, and an
unreadable table refused (it used to read as "no mount", rvsec8)."""

import pytest

from sandboy.confine import kernel_mounts
from sandboy.errors import CageError


def table(tmp_path, *mounts):
    """A mountinfo file with one line per (mount point, file system type)."""
    lines = [f"{30 + i} 1 0:{i} / {point} rw,relatime shared:{i} - {fstype} {fstype} rw"
             for i, (point, fstype) in enumerate(mounts)]
    path = tmp_path / "mountinfo"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_a_kernel_file_system_strictly_below_a_root_is_found(tmp_path):
    info = table(tmp_path, ("/", "ext4"), ("/srv/chroot/proc", "proc"), ("/srv/chroot/sys", "sysfs"),
                 ("/srv/chroot/home", "ext4"), ("/srv/other/proc", "proc"))
    assert kernel_mounts.below(["/srv/chroot"], info) == [("/srv/chroot/proc", "proc"),
                                                          ("/srv/chroot/sys", "sysfs")]


def test_a_mount_equal_to_a_root_or_beside_it_is_not(tmp_path):
    info = table(tmp_path, ("/proc", "proc"), ("/srv/chrootx/proc", "proc"), ("/srv/chroot", "tmpfs"))
    assert kernel_mounts.below(["/proc", "/srv/chroot"], info) == []


def test_an_escaped_mount_point_is_read_as_the_kernel_wrote_it(tmp_path):
    info = table(tmp_path, ("/srv/my\\040root/proc", "proc"))
    assert kernel_mounts.below(["/srv/my root"], info) == [("/srv/my root/proc", "proc")]


def test_the_root_directory_alone_asks_nothing(tmp_path):
    assert kernel_mounts.below(["/"], str(tmp_path / "absent")) == []


def test_an_unreadable_table_is_refused_not_read_as_empty(tmp_path):
    with pytest.raises(CageError, match="cannot read .* refusing"):
        kernel_mounts.below(["/srv/chroot"], str(tmp_path / "absent"))
