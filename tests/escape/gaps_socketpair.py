"""Smaller gaps: Unix datagram sockets. `socketpair(AF_UNIX, SOCK_DGRAM)` was allowed (seccomp
checked the family only: asyncio's self-pipe is a pair), and a datagram socket may `sendto` any
pathname datagram socket the run can name: /dev/log, journald, a NOTIFY_SOCKET. The harness
binds one (ARGS["dgram_path"], writable by anyone). A datagram pair (and a send to the harness's
socket through it), a sequenced-packet pair and a plain datagram socket must be refused, and
nothing may arrive; a stream pair still works (asyncio needs it)."""

import socket

DATA = ("<13>ptc escape %s" % ARGS["mark"]).encode()
TARGET = ARGS["dgram_path"]


def datagram_pair():
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    with a, b:
        a.sendto(DATA, TARGET)
        return "a datagram pair, and a datagram sent to " + TARGET


def seqpacket_pair():
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    a.close()
    b.close()
    return "a sequenced-packet pair"


def datagram_socket():
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
        s.sendto(DATA, TARGET)
        return "a datagram sent to " + TARGET


a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
a.sendall(b"x")
print("STREAM_PAIR", "ok" if b.recv(1) == b"x" else "broken")
a.close()
b.close()
attempt("socketpair(AF_UNIX, SOCK_DGRAM) and sendto %s" % TARGET, datagram_pair)
attempt("socketpair(AF_UNIX, SOCK_SEQPACKET)", seqpacket_pair)
attempt("socket(AF_UNIX, SOCK_DGRAM) and sendto %s" % TARGET, datagram_socket)
