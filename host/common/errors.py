"""Errors of the device stack, shared by every datapath and backend.

Malformed calls (wrong shapes, out-of-range integers, unknown options) raise ``ValueError``
with one line naming the bad value; what a device cannot do raises a :class:`DeviceError`.
"""

__all__ = [
    "CapacityError",
    "CosimError",
    "CosimTimeoutError",
    "DeviceClosedError",
    "DeviceError",
    "MemoryResponseError",
    "SaturationWarning",
]


class DeviceError(Exception):
    """A device cannot do what was asked (capacity, a closed device, a simulator failure)."""


class CapacityError(DeviceError):
    """Not enough free device memory or sequence slots."""


class DeviceClosedError(DeviceError):
    """The device was closed; every backend refuses further calls the same way."""


class MemoryResponseError(DeviceError):
    """The device's memory refused a request's access (an AXI response other than OKAY, or an
    address the engine will not issue): that request's result is void."""


class CosimError(DeviceError):
    """The RTL simulator failed, reported an error or died."""


class CosimTimeoutError(CosimError, TimeoutError):
    """The RTL simulator did not answer in time (it has been stopped)."""


class SaturationWarning(UserWarning):
    """A datapath saturated values (clipped them to its number format) during a call.

    Issued once per device, the first time; every saturation is counted in the device's
    ``last_saturations`` and ``total_saturations``.
    """
