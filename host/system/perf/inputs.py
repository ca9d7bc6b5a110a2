"""The inputs of the performance model, read from ``tandem.constraints``: model shapes
(``constraints/models``), the hpu RTL's measured stream efficiency and the synthesized engine
configurations (``constraints/measured``)."""

from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any

import numpy as np
import yaml
from tandem.host.hpu import HpuParams

from tandem.errors import UserError, did_you_mean

#: Measured stream efficiency of the hpu RTL (package data of ``tandem.constraints``).
EFFICIENCY_FILE = "measured/hpu_stream_efficiency.yaml"
#: Synthesized resources of hpu engine configurations (package data of ``tandem.constraints``).
RESOURCES_FILE = "measured/hpu_resources.yaml"


# --- model shapes ---------------------------------------------------------------------------
@dataclass(frozen=True)
class ModelShape:
    """The shape of a Llama-architecture decoder (``constraints/models/<name>.yaml``)."""

    name: str
    full_name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tied_embeddings: bool
    dtype_bytes: int
    max_context: int

    def __post_init__(self):
        for key in ("layers", "hidden", "heads", "kv_heads", "head_dim", "intermediate", "vocab"):
            value = getattr(self, key)
            if not isinstance(value, int) or value < 1:
                raise UserError(
                    f"model {self.name}: {key} must be a positive integer, not {value!r}"
                )
        if self.heads % self.kv_heads:
            raise UserError(
                f"model {self.name}: heads ({self.heads}) must be a multiple of kv_heads "
                f"({self.kv_heads})"
            )
        if self.dtype_bytes not in (1, 2, 4):
            raise UserError(
                f"model {self.name}: dtype_bytes must be 1, 2 or 4, not {self.dtype_bytes!r}"
            )

    @property
    def gqa_group(self) -> int:
        """Query heads per KV head."""
        return self.heads // self.kv_heads

    @property
    def layer_linear_params(self) -> int:
        """``Pl``: weights of the q, k, v, o projections and the SwiGLU MLP of one layer."""
        d, q, kv = self.hidden, self.heads * self.head_dim, self.kv_heads * self.head_dim
        return d * q + 2 * d * kv + q * d + 3 * d * self.intermediate

    @property
    def params(self) -> int:
        """All parameters (embedding, LM head unless tied, norms)."""
        embed = self.vocab * self.hidden * (1 if self.tied_embeddings else 2)
        return self.layers * (self.layer_linear_params + 2 * self.hidden) + embed + self.hidden

    @property
    def weight_bytes(self) -> int:
        """``W``: bytes of every weight in ``dtype_bytes``."""
        return self.params * self.dtype_bytes

    @property
    def kv_bytes_per_token(self) -> int:
        """GPU KV cache bytes per token (K and V of every layer in ``dtype_bytes``)."""
        return 2 * self.layers * self.kv_heads * self.head_dim * self.dtype_bytes

    @property
    def activation_elems(self) -> int:
        """Activation elements one token moves in and out of one layer's linear kernels."""
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        return 3 * self.hidden + q + 2 * kv + q + 3 * self.intermediate

    def linear_flops(self, batch) -> Any:
        """FLOPs of every linear layer and the LM head for ``batch`` tokens."""
        return 2 * batch * (self.layers * self.layer_linear_params + self.vocab * self.hidden)

    def attention_flops(self, contexts) -> Any:
        """FLOPs of decode attention (q·K and p·V) for sequences of ``contexts`` tokens."""
        return 4 * self.layers * self.heads * self.head_dim * np.asarray(contexts)


def _constraints_folder(kind: str):
    return resources.files("tandem.constraints") / kind


def model_names() -> list[str]:
    """Names of every model shape shipped in ``constraints/models``."""
    folder = _constraints_folder("models")
    return sorted(p.name[: -len(".yaml")] for p in folder.iterdir() if p.name.endswith(".yaml"))


@cache
def load_model_shape(name: str) -> ModelShape:
    """The model shape called ``name`` (file stem in ``constraints/models``)."""
    names = model_names()
    if name not in names:
        raise UserError(
            f"unknown model {name!r}{did_you_mean(name, names)}; known: {', '.join(names)}"
        )
    data = yaml.safe_load((_constraints_folder("models") / f"{name}.yaml").read_text())
    fields = set(ModelShape.__dataclass_fields__)
    missing = sorted(fields - set(data))
    if missing:
        raise UserError(f"constraints/models/{name}.yaml: missing {', '.join(missing)}")
    return ModelShape(**{k: data[k] for k in fields})


# --- measured stream efficiency -------------------------------------------------------------
@dataclass(frozen=True)
class StreamEfficiency:
    """The hpu RTL's measured stream efficiency (``constraints/measured/...yaml``).

    ``rows`` hold, per read latency and sequence length, ``beats`` per read port of one
    request, the efficiency of one request alone (``alone``) and of ``batch`` requests queued
    back to back (``queued``), and ``fill`` = a lone request's cycles outside its read window.
    """

    params: dict
    command: str
    simulator: str
    seed: int
    source: str
    batch: int
    rows: tuple[dict, ...] = field(repr=False)

    @property
    def latencies(self) -> list[int]:
        """Read latencies (cycles) the benchmark measured."""
        return sorted({r["latency"] for r in self.rows})

    def _rows(self, latency: int) -> list[dict]:
        rows = sorted((r for r in self.rows if r["latency"] == latency), key=lambda r: r["beats"])
        if not rows:
            known = ", ".join(map(str, self.latencies))
            raise UserError(
                f"no stream efficiency measured at read latency {latency}; measured: {known}"
            )
        return rows

    def efficiency(self, beats, latency: int, queued: bool = False):
        """Efficiency for requests of ``beats`` beats per port, interpolated in log2(beats).

        Held at the end values outside the measured range.
        """
        rows = self._rows(latency)
        x = np.log2([r["beats"] for r in rows])
        y = [r["queued" if queued else "alone"] for r in rows]
        return np.interp(np.log2(np.maximum(np.asarray(beats, dtype=float), 1.0)), x, y)

    def fill_cycles(self, latency: int) -> float:
        """Cycles of a lone request outside its read window (mean over measured lengths)."""
        return float(np.mean([r["fill"] for r in self._rows(latency)]))


@cache
def load_efficiency() -> StreamEfficiency:
    """The measured stream efficiency shipped in :data:`EFFICIENCY_FILE`."""
    data = yaml.safe_load((resources.files("tandem.constraints") / EFFICIENCY_FILE).read_text())
    return StreamEfficiency(
        params={**HpuParams().to_dict(), **data["params"]},  # unnamed: the default
        command=data["command"],
        simulator=data["simulator"],
        seed=data["seed"],
        source=f"constraints/{EFFICIENCY_FILE}",
        batch=data["batch"],
        rows=tuple(data["rows"]),
    )


# --- synthesized engines --------------------------------------------------------------------
def load_engine_resources() -> list[dict]:
    """The synthesized engine configurations of :data:`RESOURCES_FILE` (an empty list if none)."""
    path = resources.files("tandem.constraints") / RESOURCES_FILE
    if not path.is_file():
        return []
    return list(yaml.safe_load(path.read_text()).get("engines") or [])
