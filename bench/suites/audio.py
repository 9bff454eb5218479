"""Voice a planned meeting: espeak-ng per turn, sox to 16 kHz and to trim the silence espeak adds
(so a clip is exactly its speech), numpy to place and mix the clips (overlaps are sums), then the
condition's degradation. Deterministic: sox runs repeatable (-R) without dither (-D) and noise
comes from numpy seeded by the meeting's seed, never from sox's unseeded synth.
"""

from __future__ import annotations

import subprocess
import wave
from dataclasses import dataclass
from pathlib import Path

import numpy as np

RATE = 16000
FULL_SCALE = 32767.0
PEAK = 0.89  # mixes are scaled down to this peak if they would go above it


def run(cmd: list[str]) -> str:
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        raise RuntimeError(f"command failed ({res.returncode}): {' '.join(cmd)}\n{res.stderr.strip()}")
    return res.stdout


def tool_versions() -> dict[str, str]:
    espeak = run(["espeak-ng", "--version"]).split("Data at")[0].split(":", 1)[-1].strip()
    sox = run(["sox", "--version"]).strip().split()[-1]
    return {"espeak-ng": espeak, "sox": sox}


def read_wav(path: Path) -> np.ndarray:
    with wave.open(str(path), "rb") as w:
        if (w.getframerate(), w.getnchannels(), w.getsampwidth()) != (RATE, 1, 2):
            raise RuntimeError(f"{path}: not 16 kHz mono 16-bit")
        return np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").copy()


def write_wav(path: Path, pcm: np.ndarray) -> None:
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(RATE)
        w.writeframes(pcm.astype("<i2").tobytes())


def synthesize(espeak_args: list[str], text: str, tmp: Path, tag: str) -> np.ndarray:
    """One turn as int16 samples at 16 kHz, leading and trailing silence trimmed."""
    raw, clip = tmp / f"{tag}.raw.wav", tmp / f"{tag}.wav"
    run(["espeak-ng", *espeak_args, "-w", str(raw), text])
    run(["sox", "-R", "-D", str(raw), "-r", str(RATE), "-c", "1", "-b", "16", str(clip),
         "silence", "1", "0.02", "0.5%", "reverse", "silence", "1", "0.02", "0.5%", "reverse"])
    pcm = read_wav(clip)
    if pcm.size == 0:
        raise RuntimeError(f"espeak-ng produced no speech for {text!r}")
    return pcm


@dataclass
class Placed:
    """A clip at its place in the meeting (sample offsets) with its gain."""
    clip: np.ndarray
    start: int
    gain_db: float = 0.0

    @property
    def end(self) -> int:
        return self.start + self.clip.size


def mix(placed: list[Placed], length: int) -> np.ndarray:
    """Float mix in int16 units; overlapping clips add up."""
    out = np.zeros(length, dtype=np.float64)
    for p in placed:
        out[p.start:p.end] += p.clip.astype(np.float64) * 10.0 ** (p.gain_db / 20.0)
    return out


def speech_mask(placed: list[Placed], length: int) -> np.ndarray:
    mask = np.zeros(length, dtype=bool)
    for p in placed:
        mask[p.start:p.end] = True
    return mask


def to_pcm(x: np.ndarray) -> np.ndarray:
    """Scale down to PEAK if needed, round, clip to int16."""
    peak = float(np.max(np.abs(x))) if x.size else 0.0
    if peak > PEAK * FULL_SCALE:
        x = x * (PEAK * FULL_SCALE / peak)
    return np.clip(np.round(x), -32768, 32767).astype(np.int16)


def colored_noise(color: str, length: int, seed: int) -> np.ndarray:
    """White, pink (1/f power) or brown (1/f^2 power) noise with unit RMS, from numpy's seeded RNG."""
    white = np.random.default_rng([seed, 0x6E015E]).standard_normal(length)
    if color != "white":
        spectrum = np.fft.rfft(white)
        f = np.fft.rfftfreq(length, 1.0 / RATE)
        f[0] = f[1]
        spectrum /= f ** ({"pink": 0.5, "brown": 1.0}[color])
        spectrum[f < 20.0] = 0.0  # no DC drift
        white = np.fft.irfft(spectrum, n=length)
    return white / np.sqrt(np.mean(white ** 2))


def add_noise(x: np.ndarray, mask: np.ndarray, color: str, snr_db: float, seed: int) -> np.ndarray:
    """SNR from the speech power (samples where someone talks) against the noise power."""
    signal_power = float(np.mean(x[mask] ** 2))
    noise = colored_noise(color, x.size, seed) * np.sqrt(signal_power / 10.0 ** (snr_db / 10.0))
    return x + noise


def sox_effect(x: np.ndarray, tmp: Path, out_args: list[str], effects: list[str]) -> np.ndarray:
    """Run x through sox effects and back at 16 kHz; same length as x (sox may add or drop a sample)."""
    src, mid, dst = tmp / "fx-in.wav", tmp / "fx-mid.wav", tmp / "fx-out.wav"
    write_wav(src, to_pcm(x))
    run(["sox", "-R", "-D", str(src), *out_args, str(mid), *effects])
    run(["sox", "-R", "-D", str(mid), "-r", str(RATE), "-c", "1", "-b", "16", "-e", "signed", str(dst)])
    y = read_wav(dst).astype(np.float64)
    return np.pad(y, (0, max(0, x.size - y.size)))[: x.size]


def telephone(x: np.ndarray, tmp: Path) -> np.ndarray:
    """Band-limit to 300-3400 Hz and go through 8 kHz mu-law, as a phone line would."""
    return sox_effect(x, tmp, ["-r", "8000", "-e", "u-law", "-b", "8"], ["sinc", "300-3400"])


def reverb(x: np.ndarray, tmp: Path, reverberance: int, damping: int, room: int, predelay: int) -> np.ndarray:
    return sox_effect(x, tmp, [], ["gain", "-6", "reverb", str(reverberance), str(damping), str(room), "100",
                                   str(predelay), "0"])
