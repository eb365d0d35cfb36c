"""Layer 3's steps inside a cage's own network namespace (`namespaces.Tier.add_in_netns`):
bring `lo` up, and make a TCP listener there whose fd is sent back to the parent over a unix
socketpair (`receive_fd` takes it). Only egress (`net.domains`) uses them, so a plain run does
not load this code.
"""

import os
import sys

from sandboy.confine import _libc
from sandboy.confine._libc import (
    SYS_BIND,
    SYS_CLOSE,
    SYS_IOCTL,
    SYS_LISTEN,
    SYS_SENDMSG,
    SYS_SETSOCKOPT,
    SYS_SOCKET,
    step_flags,
    u16,
    u32,
    u64,
)
from sandboy.confine.namespaces import LISTENER_SLOT, LOOPBACK_SLOT, O_CLOEXEC

AF_UNIX, AF_INET, SOCK_STREAM, SOCK_DGRAM, SOCK_CLOEXEC = 1, 2, 1, 2, 0o2000000
SOL_SOCKET, SO_REUSEADDR, SCM_RIGHTS = 1, 2, 1
SIOCSIFFLAGS, IFF_UP, IFF_RUNNING = 0x8914, 0x1, 0x40
SYS_DUP3 = 292


def plan_loopback_up() -> list:
    """Bring `lo` up in the new network namespace (it starts down)."""
    ifreq = b"lo".ljust(16, b"\0") + u16(IFF_UP | IFF_RUNNING).ljust(24, b"\0")  # struct ifreq (40 bytes)
    return [
        ("socket for lo", (SYS_SOCKET, step_flags(save=LOOPBACK_SLOT), AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0)),
        ("bring lo up", (SYS_IOCTL, 0, (LOOPBACK_SLOT,), SIOCSIFFLAGS, ifreq)),
        ("close socket for lo", (SYS_CLOSE, 0, (LOOPBACK_SLOT,))),
    ]


def plan_listen_and_send(port: int, channel_fd: int, spare_fd: int, keep: list, host: str = "127.0.0.1",
                         backlog: int = 128) -> list:
    """Listen on host:port (TCP) inside the namespace and send the listening socket over the
    unix socket `channel_fd` (the child's end of a socketpair; `receive_fd` takes it at the
    other end). SCM_RIGHTS carries the fd's number in a buffer built now, so the listener is
    first moved onto `spare_fd`: an fd the caller holds open for this (e.g. `os.dup(channel_fd)`)
    and closes in the parent once the child has started, so the number is the child's to reuse.
    `keep`: a list the caller holds until then (buffers the msghdr points at)."""
    import _socket  # not `socket`: it loads enum and selectors (≈ 4 ms on `sandboy run`'s path)

    addr = u16(AF_INET) + port.to_bytes(2, "big") + _socket.inet_aton(host) + bytes(8)  # sockaddr_in
    cmsg = u64(16 + 4) + u32(SOL_SOCKET) + u32(SCM_RIGHTS) + u32(spare_fd) + bytes(4)  # CMSG_SPACE(4)
    keep_cmsg, cmsg_ptr = _libc.pointer_to(cmsg)
    keep_payload, payload_ptr = _libc.pointer_to(b"L")
    keep_iov, iov_ptr = _libc.pointer_to(u64(payload_ptr) + u64(1))  # struct iovec
    # struct msghdr: name, namelen (+pad), iov, iovlen, control, controllen, flags (+pad)
    msghdr = u64(0) + u64(0) + u64(iov_ptr) + u64(1) + u64(cmsg_ptr) + u64(len(cmsg)) + u64(0)
    keep.extend((keep_cmsg, keep_payload, keep_iov, msghdr))
    return [
        ("listener socket", (SYS_SOCKET, step_flags(save=LISTENER_SLOT), AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)),
        ("listener onto its fd", (SYS_DUP3, 0, (LISTENER_SLOT,), spare_fd, O_CLOEXEC)),
        ("close the listener socket", (SYS_CLOSE, 0, (LISTENER_SLOT,))),
        ("listener SO_REUSEADDR", (SYS_SETSOCKOPT, 0, spare_fd, SOL_SOCKET, SO_REUSEADDR, u32(1), 4)),
        (f"listener bind {host}:{port}", (SYS_BIND, 0, spare_fd, addr, len(addr))),
        ("listener listen", (SYS_LISTEN, 0, spare_fd, backlog)),
        ("send the listener to the parent", (SYS_SENDMSG, 0, channel_fd, msghdr, 0)),
        ("close the listener", (SYS_CLOSE, 0, spare_fd)),
    ]


MSG_CMSG_CLOEXEC = 0x40000000


def receive_fd(channel) -> int:
    """The fd sent by `plan_listen_and_send`, from the parent's end of the socketpair (a
    `socket.socket` or a bare `_socket.socket`), close-on-exec."""
    import _socket

    _data, ancillary, _flags, _addr = channel.recvmsg(1, _socket.CMSG_SPACE(4), MSG_CMSG_CLOEXEC)
    fds = [int.from_bytes(data[i:i + 4], sys.byteorder) for level, kind, data in ancillary
           if level == SOL_SOCKET and kind == SCM_RIGHTS for i in range(0, len(data) - 3, 4)]
    if not fds:
        raise OSError("the cage sent no listener")
    for extra in fds[1:]:
        os.close(extra)
    return fds[0]
