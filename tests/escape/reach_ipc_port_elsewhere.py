"""Reach: the IPC port on any other address. Landlock's TCP rule is a port, not an address:
before runs had a network namespace of their own, a connection to `127.0.0.2:<IPC port>` (in a
pod: any host listening on that port number) took a run's data out. The harness listens on the
IPC port at other addresses (another loopback address, IPv6's loopback, this machine's outside
addresses) and gives them in ARGS["targets"]; the run connects to each and sends its data, then
tries TCP Fast Open (a send that connects). Each must be refused: the run's network namespace has
only its own loopback, where nothing but its end of the bridge listens (ECONNREFUSED,
ENETUNREACH), and seccomp refuses MSG_FASTOPEN. The harness checks its listeners accepted
nothing. The run's own bridge still answers: a tool call goes through."""

import socket

DATA = ("data of %s" % ARGS["mark"]).encode()
# A refusal: nothing there in the run's network (refused, unreachable), or the sandbox's no.
REFUSED = refused_by("ECONNREFUSED", "ENETUNREACH", "EHOSTUNREACH", "EADDRNOTAVAIL",
                     "EACCES", "EPERM")


def family(host):
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def connect_and_send(host, port):
    def step():
        with socket.socket(family(host), socket.SOCK_STREAM) as s:
            s.settimeout(5)
            s.connect((host, port))
            s.sendall(DATA)
            return "connected to %s port %d and sent %d bytes" % (host, port, len(DATA))
    return step


def fast_open(host, port):
    def step():
        with socket.socket(family(host), socket.SOCK_STREAM) as s:
            s.settimeout(5)
            sent = s.sendto(DATA, socket.MSG_FASTOPEN, (host, port))
            return "sent %d bytes by TCP Fast Open to %s port %d" % (sent, host, port)
    return step


for host, port in ARGS["targets"]:
    attempt("TCP connect to %s port %d (the IPC port) and send data" % (host, port),
            connect_and_send(host, port), REFUSED)
host, port = ARGS["targets"][0]
attempt("TCP Fast Open to %s port %d (the IPC port)" % (host, port), fast_open(host, port),
        REFUSED)
print("BRIDGE", (await echo(text="through the bridge"))["text"])
