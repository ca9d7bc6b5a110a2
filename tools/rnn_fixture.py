"""Build ``tests/data/rnn_silero_vad.npz``: a trained LSTM cell and its real inputs.

Run: ``python tools/rnn_fixture.py [--seconds 40] [--out PATH]``. Needs
``pip install --no-deps silero-vad==6.2.3`` (the trained model ships inside that package as
``silero_vad/data/silero_vad.jit``, MIT license; nothing is downloaded at run time),
Debian's ``espeak-ng`` (the speech) and ``base-files`` (the text). About ten seconds.

What it does. Silero VAD v6 is a voice-activity detector: an STFT and four convolutions turn each
32 ms chunk of 16 kHz audio (512 samples plus 64 of context) into 128 features, and a trained
``torch.nn.LSTMCell(128, 128)`` carries its state across chunks. The script speaks two passages
of the GNU GPL version 3 (``/usr/share/common-licenses/GPL-3``) with espeak-ng in two voices,
resamples them to 16 kHz, adds microphone-level noise (N(0, 0.002), seed 0), runs the model's
encoder (its own TorchScript modules, float32) on every chunk and keeps the LSTM's inputs. The
cell's weights are copied into a plain ``nn.LSTMCell``; as a check, that cell and the model's
decoder head over the kept inputs must give the speech probability the whole TorchScript model
gives, chunk by chunk as its users call it, within 1e-4 on every chunk of the first clip.
(The package's ``silero_vad_16k.safetensors`` holds other weights than ``silero_vad.jit``,
which ``load_silero_vad()`` loads; the fixture uses the latter.)

The fixture (``np.load`` reads it; written with fixed zip timestamps, so the same inputs give the
same bytes): ``weight_ih``, ``weight_hh``, ``bias_ih``, ``bias_hh`` (float32, the
``LSTMCell``'s ``state_dict`` names), ``x`` (float16 ``[steps, clips, 128]``: the LSTM inputs,
one clip per batch column), ``voices``, ``source``.
"""

import argparse
import hashlib
import importlib.util
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
from scipy.signal import resample_poly
from tandem.mappings.rnn.writer import write_npz

REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO / "tests" / "data" / "rnn_silero_vad.npz"
TEXT = Path("/usr/share/common-licenses/GPL-3")
#: (espeak-ng voice, words per minute, first word of the passage)
VOICES = (("en-us", 165, 120), ("en+f3", 150, 900))
RATE, CHUNK, CONTEXT = 16000, 512, 64
LSTM_KEYS = ("weight_ih", "weight_hh", "bias_ih", "bias_hh")
INSTALL_HINT = "pip install --no-deps silero-vad==6.2.3 && apt-get install espeak-ng"


def silero_data() -> Path:
    spec = importlib.util.find_spec("silero_vad")
    if spec is None or not spec.submodule_search_locations:
        sys.exit(f"rnn_fixture: error: silero-vad is not installed ({INSTALL_HINT})")
    return Path(next(iter(spec.submodule_search_locations))) / "data"


def speak(text: str, voice: str, wpm: int, seconds: float) -> np.ndarray:
    """espeak-ng's speech of ``text`` at 16 kHz, float in [-1, 1], cut to ``seconds``."""
    with tempfile.TemporaryDirectory() as tmp:
        wav = Path(tmp) / "speech.wav"
        subprocess.run(
            ["espeak-ng", "-v", voice, "-s", str(wpm), "-w", str(wav), "--stdin"],
            input=text.encode(),
            check=True,
        )
        from scipy.io import wavfile

        rate, pcm = wavfile.read(wav)
    audio = pcm.astype(np.float64) / 32768.0
    audio = resample_poly(audio, RATE, rate)
    return audio[: int(seconds * RATE)]


def encoder(vad, chunks: torch.Tensor) -> torch.Tensor:
    """Silero VAD's encoder (STFT, four convolutions): ``[N, CONTEXT + CHUNK]`` audio chunks to
    ``[N, 128]`` LSTM inputs, by the TorchScript model's own modules."""
    with torch.no_grad():
        return vad.encoder(vad.stft(chunks)).squeeze(-1)


def chunks_of(audio: np.ndarray) -> torch.Tensor:
    steps = len(audio) // CHUNK
    padded = np.concatenate([np.zeros(CONTEXT), audio[: steps * CHUNK]]).astype(np.float32)
    index = np.arange(steps)[:, None] * CHUNK + np.arange(CONTEXT + CHUNK)[None, :]
    return torch.from_numpy(padded[index])


def check_against_jit(jit, cell, features: torch.Tensor, audio: np.ndarray) -> float:
    """Largest difference of the speech probability between ``cell`` (an ``nn.LSTMCell``
    loaded from the extracted state_dict) run over ``features`` followed by the model's decoder
    head, and the whole TorchScript model fed ``audio`` chunk by chunk as its users do."""
    worst, state = 0.0, None
    with torch.no_grad():
        for t in range(features.shape[0]):
            state = cell(features[t : t + 1], state)
            head = jit._model.decoder.decoder(state[0].unsqueeze(-1))
            ours = head.squeeze(1).mean().item()
            chunk = torch.from_numpy(audio[t * CHUNK : (t + 1) * CHUNK].astype(np.float32))
            theirs = jit(chunk.unsqueeze(0), RATE).item()
            worst = max(worst, abs(ours - theirs))
    return worst


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=40.0, help="length of each clip")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    model = silero_data() / "silero_vad.jit"
    jit = torch.jit.load(str(model), map_location="cpu").eval()
    rnn = jit._model.decoder.rnn
    state = {k: getattr(rnn, k).detach().clone() for k in LSTM_KEYS}
    cell = torch.nn.LSTMCell(128, 128)
    cell.load_state_dict(state)
    words = TEXT.read_text().split()
    rng = np.random.default_rng(0)
    clips, features = [], []
    for voice, wpm, first in VOICES:
        text = " ".join(words[first : first + 400])
        audio = speak(text, voice, wpm, args.seconds)
        audio = 0.5 * audio / np.abs(audio).max() + rng.normal(0.0, 0.002, audio.shape)
        clips.append(audio)
        features.append(encoder(jit._model, chunks_of(audio)))
    steps = min(f.shape[0] for f in features)
    x = torch.stack([f[:steps] for f in features], dim=1)
    worst = check_against_jit(jit, cell, features[0], clips[0])
    print(f"{steps} steps x {len(VOICES)} clips; speech probability vs silero_vad.jit: {worst:.1e}")
    if worst > 1e-4:
        sys.exit("rnn_fixture: error: the extracted LSTM cell disagrees with silero_vad.jit")
    arrays = {k: v.numpy() for k, v in state.items()}
    arrays["x"] = x.numpy().astype(np.float16)
    arrays["voices"] = np.array([f"{v} {w} wpm, words {f}.." for v, w, f in VOICES])
    digest = hashlib.sha256(model.read_bytes()).hexdigest()
    arrays["source"] = np.array(f"silero-vad 6.2.3 silero_vad.jit sha256 {digest}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_npz(args.out, arrays)
    print(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
