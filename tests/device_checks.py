"""Checks every stream-engine device must pass, shared by the per-datapath device tests."""

import pytest
from tandem.host.common.errors import DeviceClosedError


def assert_backend_choice_is_checked(cls) -> None:
    """``cls`` starts its RTL backend lazily and rejects a bad backend or bad options."""
    dev = cls(backend="rtl", simulator="icarus")  # no simulator needed until the first call
    assert dev.backend.name == "rtl" and not dev.backend.started
    dev.close()
    with pytest.raises(ValueError, match="unknown backend 'fpga'"):
        cls(backend="fpga")
    with pytest.raises(ValueError, match=r"golden backend takes (no options|only kernel)"):
        cls(simulator="icarus")
    with pytest.raises(ValueError, match="simulator must be 'verilator' or 'icarus'"):
        cls(backend="rtl", simulator="xsim")


def assert_closed_device_refuses(dev, call) -> None:
    """``call`` (a call on the golden device ``dev``) works, and raises once ``dev`` is closed."""
    call()
    with dev:  # a context manager closes it
        pass
    assert dev.closed
    with pytest.raises(DeviceClosedError, match="the device is closed"):
        call()
    dev.close()  # closing twice is harmless
