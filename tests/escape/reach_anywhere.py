"""Reach: any address but the IPC port. A TCP connect to a listener the harness opened, a TCP
port of our own, a UDP datagram, a pathname Unix socket: each must be refused (Landlock TCP
connect/bind, seccomp for other socket types). The harness checks nothing arrived."""

import socket


def tcp_connect():
    with socket.create_connection(("127.0.0.1", ARGS["tcp_port"]), timeout=5) as s:
        s.sendall(ARGS["mark"].encode())
        return "connected and sent"


def tcp_listen():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        return "listening on %s" % (s.getsockname(),)
    finally:
        s.close()


def udp_send():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.sendto(ARGS["mark"].encode(), ("127.0.0.1", ARGS["udp_port"]))
        return "datagram sent"
    finally:
        s.close()


def unix_connect():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(ARGS["unix_path"])
        s.sendall(ARGS["mark"].encode())
        return "connected and sent"
    finally:
        s.close()


attempt("TCP connect to 127.0.0.1:%d" % ARGS["tcp_port"], tcp_connect)
attempt("TCP bind and listen on 127.0.0.1:0", tcp_listen)
attempt("UDP sendto 127.0.0.1:%d" % ARGS["udp_port"], udp_send)
attempt("Unix connect to %s" % ARGS["unix_path"], unix_connect)
