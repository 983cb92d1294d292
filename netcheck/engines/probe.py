"""The known-answer compute probe (docs/protocol.md §5.9, docs/detection.md "Relay test").

The coordinator sends a 32-byte random ``challenge``; the node evaluates a tiny
two-layer integer MLP seeded from it **on its engine's compute device** and replies
with a SHA-256 of the result. The coordinator times the round trip (the compute-path
RTT) and recomputes the answer on its CPU with numpy to check it (under 1 ms).

Definition (``N = PROBE_DIM = 64``)::

    stream = SHAKE-256("netcheck/1 probe\\0" || challenge), first 3 * N * N bytes
    X, W1, W2 = the stream cut into three N x N row-major matrices, each byte b -> (b % 3) - 1
    H = clamp(W1 @ X, -1, 1)          # entries in {-1, 0, 1}
    Y = W2 @ H                        # integers in [-N, N]
    answer = SHA-256("netcheck/1 probe answer\\0" || Y as int16 little-endian, row-major)

Every operand and every partial sum is an integer of magnitude at most ``N = 64``, so
the arithmetic is exact in float32, float16 and bfloat16 (integers up to 256 are exact
even in bfloat16's 8-bit significand), whatever the accumulation order: a GPU in any
of the profile dtypes and numpy on the CPU give the same bytes. That is what lets the
coordinator verify the answer, and what lets engines run it in their own dtype.

Limit: the probe is tiny on purpose (it measures a path, not speed), so anything can
compute it. It catches a node that forwards its whole stream to a remote GPU (the
probe takes the extra network leg); a relay that recognises probes and answers them
itself, before forwarding batches, is not caught by this test (docs/detection.md).

Pure: numpy only; :func:`torch_answer` takes the torch module as an argument, so this
module never imports torch.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

PROBE_DIM = 64
CHALLENGE_BYTES = 32
ANSWER_BYTES = 32
STREAM_LABEL = b"netcheck/1 probe\0"
ANSWER_LABEL = b"netcheck/1 probe answer\0"

IntMatrix = npt.NDArray[np.int8]


def _check(challenge: bytes) -> None:
    if type(challenge) is not bytes or len(challenge) != CHALLENGE_BYTES:
        raise ValueError(f"probe challenge must be {CHALLENGE_BYTES} bytes")


def operands(challenge: bytes) -> tuple[IntMatrix, IntMatrix, IntMatrix]:
    """``(X, W1, W2)``: three ``PROBE_DIM x PROBE_DIM`` int8 matrices in {-1, 0, 1}.

    Raises:
        ValueError: ``challenge`` is not exactly 32 bytes.
    """
    _check(challenge)
    n = PROBE_DIM * PROBE_DIM
    stream = hashlib.shake_256(STREAM_LABEL + challenge).digest(3 * n)
    vals = (np.frombuffer(stream, dtype=np.uint8) % 3).astype(np.int8) - 1
    x, w1, w2 = (vals[i * n : (i + 1) * n].reshape(PROBE_DIM, PROBE_DIM) for i in range(3))
    return x, w1, w2


def digest(y: npt.NDArray[Any]) -> bytes:
    """``SHA-256(ANSWER_LABEL || Y as int16 little-endian, row-major)`` of a result ``Y``.

    Raises:
        ValueError: ``Y`` has the wrong shape or entries outside [-N, N] (not integers).
    """
    arr = np.asarray(y)
    if arr.shape != (PROBE_DIM, PROBE_DIM):
        raise ValueError(f"probe result must be {PROBE_DIM}x{PROBE_DIM}, got {arr.shape}")
    ints = np.rint(arr.astype(np.float64))
    if not np.array_equal(ints, arr.astype(np.float64)) or np.abs(ints).max() > PROBE_DIM:
        raise ValueError("probe result entries must be integers in [-N, N]")
    return hashlib.sha256(ANSWER_LABEL + ints.astype("<i2").tobytes(order="C")).digest()


def answer(challenge: bytes) -> bytes:
    """The known answer, computed on the CPU with numpy (int32 arithmetic, exact).

    Used by the coordinator to verify replies and by engines without a device of their
    own (:meth:`netcheck.engines.base.Engine.probe`).

    Raises:
        ValueError: ``challenge`` is not exactly 32 bytes.
    """
    x, w1, w2 = (m.astype(np.int32) for m in operands(challenge))
    h = np.clip(w1 @ x, -1, 1)
    return digest(w2 @ h)


def answers(challenges: Sequence[bytes]) -> list[bytes]:
    """:func:`answer` of each challenge, computed together: the operands are stacked and
    multiplied as one batched float32 matmul (exact: every value and partial sum is an
    integer of magnitude <= ``PROBE_DIM``, module docstring), about 20x less CPU per
    probe than one :func:`answer` call each. The coordinator checks a round's probes
    with it, in a thread, off the event loop.

    Raises:
        ValueError: a challenge is not exactly 32 bytes.
    """
    if not challenges:
        return []
    for c in challenges:
        _check(c)
    n, k = PROBE_DIM * PROBE_DIM, len(challenges)
    stream = b"".join(hashlib.shake_256(STREAM_LABEL + c).digest(3 * n) for c in challenges)
    vals = (np.frombuffer(stream, dtype=np.uint8) % 3).astype(np.float32) - 1
    x, w1, w2 = vals.reshape(k, 3, PROBE_DIM, PROBE_DIM).transpose(1, 0, 2, 3)
    y = np.rint(np.matmul(w2, np.clip(np.matmul(w1, x), -1, 1))).astype("<i2")
    return [hashlib.sha256(ANSWER_LABEL + m.tobytes(order="C")).digest() for m in y]


def torch_answer(torch: Any, device: Any, dtype: Any, challenge: bytes) -> bytes:
    """The known answer computed by torch on ``device`` in ``dtype`` (e.g.
    ``torch.bfloat16``); equal to :func:`answer` (exact arithmetic, module docstring).

    Raises:
        ValueError: ``challenge`` is not exactly 32 bytes.
    """
    x, w1, w2 = (torch.from_numpy(m).to(device=device, dtype=dtype) for m in operands(challenge))
    with torch.inference_mode():
        h = torch.clamp(w1 @ x, -1, 1)
        y = (w2 @ h).to(torch.int16).cpu().numpy()
    return digest(y)
