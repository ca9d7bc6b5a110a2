"""The cocotb end of the co-simulation socket, shared by every server module.

:func:`serve` connects to the host's Unix socket (plusarg ``+tandem_cosim_socket=PATH``) and
answers its messages until the host sends ``("close",)`` or goes away. Messages are pickled
tuples (:class:`multiprocessing.connection.Connection` framing), one reply per request:
``("ok", *fields)``, or ``("error", "Type: message")`` for any exception the handler raises,
so a failure in the simulation reaches the host as a Python exception instead of a hang.
"""

import socket
from collections.abc import Awaitable, Callable
from multiprocessing.connection import Connection

import cocotb
from cocotb.triggers import Timer

__all__ = ["SOCKET", "serve", "settle"]

SOCKET = "tandem_cosim_socket"


async def settle() -> None:
    """Let every port model act on the clock edge the caller woke at, then return.

    A server that resumes from ``RisingEdge`` (the end of a reset) may run before the port
    models that wait on the same edge, so beats it queues would go out at this edge, while
    beats queued after any other wake-up go out at the next one. One picosecond later every
    model has acted: requests start the same way after a reset as after a request, as the
    native harness (:mod:`tandem.sim.native`) starts them, so both count the same cycles.
    """
    await Timer(1, "ps")


async def serve(
    handle: Callable[[tuple], Awaitable[tuple]],
    recover: Callable[[], Awaitable[None]] | None = None,
) -> None:
    """Answer the host's messages with ``("ok", *await handle(message))`` until it closes.

    ``recover`` runs after a handler failed (for example a reset that clears half-sent
    stimulus), before the error reply goes out.
    """
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(str(cocotb.plusargs[SOCKET]))
    conn = Connection(sock.detach())
    try:
        while True:
            try:
                message = conn.recv()
            except EOFError:
                return  # the host went away: end the simulation
            if message[0] == "close":
                conn.send(("ok",))
                return
            try:
                reply = ("ok", *await handle(message))
            except Exception as exc:  # every failure goes back to the host as an exception
                reply = ("error", f"{type(exc).__name__}: {exc}")
                if recover is not None:
                    await recover()
            conn.send(reply)
    finally:
        conn.close()
