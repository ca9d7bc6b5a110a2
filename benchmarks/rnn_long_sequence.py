"""Accuracy of the rnn engine on long sequences of trained LSTMs against float32 torch, and what
saturates, with a 16-bit cell state and with the default 27-bit one.

Run: ``python benchmarks/rnn_long_sequence.py [--steps 1250] [--train-steps 400]``. About a
minute on two cores, plus half a minute the first time (training; cached after).

Models (trained weights, realistic inputs):

``silero-vad``
    The ``nn.LSTMCell(128, 128)`` of silero VAD v6 (PyPI ``silero-vad``), with its own encoder's
    outputs on two clips of espeak-ng speech as inputs: ``tests/data/rnn_silero_vad.npz``
    (``tools/rnn_fixture.py``), 1250 steps of 32 ms each.
``char-lstm``
    A character-level language model (``nn.Embedding(V, 32)``, ``nn.LSTM(32, 128)``,
    ``nn.Linear(128, V)``) trained here, deterministically (seed 0, one thread, Adam 3e-3,
    32 streams of 128 characters a step with the state carried across steps, ``--train-steps``
    steps), on the first 85 % of the GNU GPL v3
    (``/usr/share/common-licenses/GPL-3``, Debian's ``base-files``), cached in
    ``$XDG_CACHE_HOME/tandem/rnn/``. Inputs: the embeddings of two held-out passages.

Engine configurations (golden model, bit-exact with the RTL): ``int16 c`` is a 16-bit
cell state (``cell_bits=16, cell_frac=12``: +-8), ``default`` the default parameters
(``cell_bits=27, cell_frac=16``: +-1024), ``x +-16`` the default with ``state_frac=11`` (x and h
to +-16), for inputs beyond +-8. Weights int16. For each: max and mean absolute error of h and c
against float32 torch over every step, unit and sequence, the largest |c| torch reaches, and
the saturated values by place (x: clipped inputs; act, c, h: in the engine). Exit status 1 if
the default configuration saturates c or misses the h target (0.02) on the first 600 steps.
"""

import argparse
import hashlib
import os
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch
from tandem.host.common.errors import SaturationWarning
from tandem.host.rnn import RnnParams, torch_lstm_reference
from tandem.host.rnn.device import RnnDevice

from tandem.bench import Figures, add_benchmark_options

REPO = Path(__file__).resolve().parent.parent
FIXTURE = REPO / "tests" / "data" / "rnn_silero_vad.npz"
TEXT = Path("/usr/share/common-licenses/GPL-3")
CONFIGS = {
    "int16 c": {"cell_bits": 16, "cell_frac": 12},
    "default": {},
    "x +-16": {"state_frac": 11},
}
TARGET = 0.02
TARGET_STEPS = 600


def cache_dir() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(root) / "tandem" / "rnn"


def silero_vad(steps: int):
    """The trained cell and its inputs ``(T, 2, 128)``."""
    data = np.load(FIXTURE)
    cell = torch.nn.LSTMCell(128, 128)
    cell.load_state_dict({k: torch.from_numpy(data[k]) for k in cell.state_dict()})
    return cell, data["x"][:steps].astype(np.float64)


class CharLstm(torch.nn.Module):
    def __init__(self, vocab: int):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, 32)
        self.lstm = torch.nn.LSTM(32, 128)
        self.out = torch.nn.Linear(128, vocab)

    def forward(self, ids, state=None):  # ids (T, B)
        h, state = self.lstm(self.embed(ids), state)
        return self.out(h), state


def char_lstm(steps: int, train_steps: int):
    """The LSTM layer of a character model trained on the GPL's first 85 % (cached), the
    embeddings of two held-out passages ``(T, 2, 32)`` and the model's loss on each."""
    if not TEXT.exists():
        return None
    text = TEXT.read_text()
    chars = sorted(set(text))
    ids = torch.tensor([chars.index(ch) for ch in text])
    split = int(0.85 * len(ids))
    torch.manual_seed(0)
    model = CharLstm(len(chars))
    key = hashlib.sha256(
        f"{text}|{train_steps}|32x128|adam3e-3|tbptt32x128|{torch.__version__}".encode()
    ).hexdigest()[:16]
    path = cache_dir() / f"char_lstm_gpl3_{key}.pt"
    if path.exists():
        model.load_state_dict(torch.load(path, weights_only=True))
    else:
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # one reduction order: the same weights on every machine
        start = time.perf_counter()
        optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
        # 32 streams through the text, 128 characters a step, the state carried from step to
        # step (truncated backpropagation through time): long sequences are what it learns.
        span = split - 129
        offsets = torch.arange(32) * (span // 32)
        state = None
        for step in range(train_steps):
            starts = ((offsets + step * 128) % span).tolist()
            batch = torch.stack([ids[s : s + 129] for s in starts], dim=1)
            logits, state = model(batch[:-1], state)
            state = tuple(v.detach() for v in state)
            loss = torch.nn.functional.cross_entropy(
                logits.reshape(-1, len(chars)), batch[1:].reshape(-1)
            )
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            if (step + 1) % 100 == 0:
                print(f"  char-lstm training step {step + 1}: loss {loss.item():.3f}")
        torch.set_num_threads(threads)
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save(model.state_dict(), path)
        print(f"  trained in {time.perf_counter() - start:.0f} s, cached in {path}")
    held = ids[split:]
    length = min(steps, (len(held) - 1) // 2)
    passages = torch.stack([held[:length], held[length : 2 * length]], dim=1)
    with torch.no_grad():
        logits, _ = model(passages[:-1])
        losses = [
            float(torch.nn.functional.cross_entropy(logits[:, b], passages[1:, b]))
            for b in range(2)
        ]
        x = model.embed(passages).double().numpy()
    return model.lstm, x, losses


def measure(module, x, config: dict) -> dict:
    params = RnnParams(max_input=x.shape[2], max_hidden=128, batch=2, **config)
    href, cref = torch_lstm_reference(module, x)
    dev = RnnDevice(params)
    dev.load(module.state_dict())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SaturationWarning)  # counted and printed below
        h, c = dev.run(dev.quantize(x))
    dh = np.abs(dev.to_float(h) - href)
    dc = np.abs(dev.to_float(c, "c") - cref)
    head = min(TARGET_STEPS, len(x))
    return {
        "h_max": float(dh.max()),
        "h_mean": float(dh.mean()),
        "h_max_600": float(dh[:head].max()),
        "c_max": float(dc.max()),
        "c_mean": float(dc.mean()),
        "c_ref": float(np.abs(cref).max()),
        "saturations": dict(dev.total_saturations),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1250, help="steps per sequence (<= 1250)")
    parser.add_argument("--train-steps", type=int, default=400, help="char-lstm training steps")
    add_benchmark_options(parser)
    args = parser.parse_args(argv)
    figures = Figures("rnn-long-sequence", config=vars(args) | {"figures": None})
    models = {"silero-vad": silero_vad(args.steps)}
    trained = char_lstm(args.steps, args.train_steps)
    if trained is None:
        print(f"char-lstm skipped: {TEXT} not found (Debian's base-files)")
    else:
        models["char-lstm"] = trained[:2]
        losses = " and ".join(f"{v:.2f}" for v in trained[2])
        print(f"char-lstm: held-out loss {losses} nats per character (the two passages)")
    print(
        f"{'model':<11} {'config':<8} {'steps':>5} {'|c| max':>7} {'h max':>9} {'h mean':>9}"
        f" {'h max<=600':>10} {'c max':>9} {'c mean':>9}  saturated"
    )
    ok = True
    for model_name, (module, x) in models.items():
        for config_name, config in CONFIGS.items():
            e = measure(module, x, config)
            sat = ", ".join(f"{k} {v}" for k, v in e["saturations"].items()) or "none"
            print(
                f"{model_name:<11} {config_name:<8} {len(x):>5} {e['c_ref']:>7.1f}"
                f" {e['h_max']:>9.2e} {e['h_mean']:>9.2e} {e['h_max_600']:>10.2e}"
                f" {e['c_max']:>9.2e} {e['c_mean']:>9.2e}  {sat}"
            )
            note = f"{len(x)} steps x 2 sequences, int16 weights, {config_name} ({config})"
            figures.add(
                f"max abs error on h, {model_name}, {config_name}",
                e["h_max"],
                "abs",
                reference=TARGET,
                reference_label="target",
                higher_is_better=False,
                design="rnn",
                note=note,
            )
            figures.add(
                f"mean abs error on h, {model_name}, {config_name}",
                e["h_mean"],
                "abs",
                higher_is_better=False,
                design="rnn",
                note=note,
            )
            figures.add(
                f"saturated c values, {model_name}, {config_name}",
                e["saturations"].get("c", 0),
                "values",
                higher_is_better=False,
                design="rnn",
                note=note,
            )
            if config_name == "default":
                ok &= e["h_max_600"] < TARGET and not e["saturations"].get("c")
    figures.write(args.figures)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
