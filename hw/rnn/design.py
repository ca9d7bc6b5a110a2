"""The ``rnn`` design entry (``tandem generate|sim|synth rnn``), for code that imports it here.

``tandem/builtin_designs.py`` registers ``rnn`` like every other design; :data:`RNN_DESIGN` is that
registry entry, looked up on first use (importing this module registers nothing).
"""

__all__ = ["RNN_DESIGN"]  # noqa: F822  (provided by the module __getattr__ below)


def __getattr__(name: str):
    if name == "RNN_DESIGN":
        from tandem.registry import get_design

        return get_design("rnn")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
