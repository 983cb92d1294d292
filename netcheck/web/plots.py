"""Server-side plots for the dashboard: matplotlib figures rendered to inline SVG.

No pyplot and no global state: each plot builds its own :class:`~matplotlib.figure.Figure`
and renders it with the SVG backend (text kept as text, ids salted so output is
deterministic). Every data series carries an SVG id starting with ``data-`` (set with
``Artist.set_gid``) so tests and analysts can find the plotted points in the page.
Rendering is serialized by a lock: matplotlib's font and text caches are shared.
Rendered SVGs are kept in a small LRU cache keyed by a hash of the plotted data, so a
page whose data did not change (a finished round, an old flag) is not drawn again.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import matplotlib

matplotlib.use("Agg")  # never a GUI backend, even if pyplot is imported elsewhere

import numpy as np  # noqa: E402
from matplotlib import rc_context  # noqa: E402
from matplotlib.backends.backend_svg import FigureCanvasSVG  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

_LOCK = threading.Lock()
#: ``text.parse_math`` off: labels are node names, and one holding ``$...$`` was parsed
#: as mathtext (a name like ``gpu $\frac{$`` raised ValueError: every page plotting the
#: node was a 500). Text kept as SVG text is escaped by matplotlib.
_RC: Any = {
    "svg.fonttype": "none", "svg.hashsalt": "netcheck", "font.size": 9, "text.parse_math": False,
}  # fmt: skip

#: Colour of each verdict in every plot (colour-blind-safe Okabe-Ito palette).
VERDICT_COLORS = {
    "pass": "#009E73",
    "late": "#E69F00",
    "wrong-answer": "#D55E00",
    "malformed": "#CC79A7",
    "missing": "#56B4E9",
    "disconnected": "#0072B2",
    "profile-mismatch": "#999999",
}


def verdict_color(verdict: str | None) -> str:
    """Plot colour of a verdict (black for unknown ones)."""
    return VERDICT_COLORS.get(verdict or "", "#000000")


#: Rendered SVGs kept (LRU); each is tens of kB.
CACHE_SIZE = 256
_CACHE: OrderedDict[str, str] = OrderedDict()


def _cache_key(name: str, data: Any) -> str:
    blob = json.dumps(data, sort_keys=True, default=str, separators=(",", ":"))
    return name + ":" + hashlib.sha256(blob.encode()).hexdigest()


def _render(
    width: float, height: float, draw: Callable[[Figure], None], key: str | None = None
) -> str:
    if key is not None:
        with _LOCK:
            hit = _CACHE.get(key)
            if hit is not None:
                _CACHE.move_to_end(key)
                return hit
    with _LOCK, rc_context(_RC):
        fig = Figure(figsize=(width, height), layout="constrained")
        FigureCanvasSVG(fig)
        draw(fig)
        buf = io.StringIO()
        fig.savefig(buf, format="svg")
    text = buf.getvalue()
    svg = text[text.index("<svg") :]
    if key is not None:
        with _LOCK:
            _CACHE[key] = svg
            while len(_CACHE) > CACHE_SIZE:
                _CACHE.popitem(last=False)
    return svg


def _empty(fig: Figure, message: str) -> None:
    ax = fig.add_subplot()
    ax.set_axis_off()
    ax.text(0.5, 0.5, message, ha="center", va="center", transform=ax.transAxes)


def round_timeline_svg(rows: Sequence[Mapping[str, Any]], label: Callable[[str], str]) -> str:
    """Release and arrival of every node in one round, ms after the first release.

    Each node is a row: a bar from its release to its result's arrival (coloured by
    verdict), a dot at release, a square at arrival and a tick at its deadline.
    """
    timed = [r for r in rows if r.get("released_ns") is not None]
    height = 1.2 + 0.32 * max(len(rows), 1)

    def draw(fig: Figure) -> None:
        if not timed:
            _empty(fig, "no node was released in this round")
            return
        t0 = min(int(r["released_ns"]) for r in timed)
        ax = fig.add_subplot()
        ys = list(range(len(timed)))
        rel = [(int(r["released_ns"]) - t0) / 1e6 for r in timed]
        arr = [
            None if r.get("arrived_ns") is None else (int(r["arrived_ns"]) - t0) / 1e6
            for r in timed
        ]
        for y, r, x0, x1 in zip(ys, timed, rel, arr, strict=True):
            if x1 is not None:
                (seg,) = ax.plot([x0, x1], [y, y], color=verdict_color(r.get("verdict")), lw=3)
                seg.set_gid(f"data-span-{y}")
        (line,) = ax.plot(rel, ys, "o", color="#333333", ms=5, label="release")
        line.set_gid("data-release")
        got = [(x, y) for x, y in zip(arr, ys, strict=True) if x is not None]
        if got:
            (line,) = ax.plot(
                [g[0] for g in got], [g[1] for g in got], "s", color="#0072B2", ms=5,
                label="arrival",
            )  # fmt: skip
            line.set_gid("data-arrival")
        dl = [
            (x0 + float(r["deadline_s"]) * 1e3, y)
            for y, r, x0 in zip(ys, timed, rel, strict=True)
            if r.get("deadline_s") is not None
        ]
        if dl:
            (line,) = ax.plot(
                [d[0] for d in dl], [d[1] for d in dl], "|", color="#D55E00", ms=14, mew=2,
                label="deadline",
            )  # fmt: skip
            line.set_gid("data-deadline")
        ax.set_yticks(ys, [label(str(r["node_key"])) for r in timed])
        ax.invert_yaxis()
        ax.set_xlabel("ms after the first release (coordinator monotonic clock)")
        ax.grid(axis="x", alpha=0.3)
        ax.legend(loc="lower left", bbox_to_anchor=(0.0, 1.0), ncols=3, fontsize=8, frameon=False)

    labels = [label(str(r["node_key"])) for r in timed]
    return _render(7.5, height, draw, _cache_key("timeline", [list(rows), labels]))


def latency_history_svg(history: Sequence[Mapping[str, Any]]) -> str:
    """A node's elapsed time per round (dots coloured by verdict) against its deadline."""

    def draw(fig: Figure) -> None:
        pts = [(i, h) for i, h in enumerate(history) if h.get("elapsed_s") is not None]
        if not history:
            _empty(fig, "no verdicts yet")
            return
        ax = fig.add_subplot()
        if pts:
            sc = ax.scatter(
                [i for i, _ in pts],
                [float(h["elapsed_s"]) for _, h in pts],
                c=[verdict_color(h.get("verdict")) for _, h in pts],
                s=18,
                zorder=3,
                label="elapsed (release → arrival)",
            )
            sc.set_gid("data-latency")
        dl = [(i, h["deadline_s"]) for i, h in enumerate(history) if h.get("deadline_s")]
        if dl:
            (line,) = ax.step(
                [i for i, _ in dl], [float(d) for _, d in dl], where="mid", color="#D55E00",
                lw=1.5, label="deadline",
            )  # fmt: skip
            line.set_gid("data-deadline")
        missing = [i for i, h in enumerate(history) if h.get("elapsed_s") is None]
        if missing:
            for i in missing:
                ax.axvline(i, color=verdict_color(history[i].get("verdict")), alpha=0.35, lw=1)
        ax.set_xlabel("round (oldest → newest); vertical lines: no result")
        ax.set_ylabel("seconds")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(loc="lower left", bbox_to_anchor=(0.0, 1.0), ncols=2, fontsize=8, frameon=False)

    return _render(7.5, 3.0, draw, _cache_key("latency", list(history)))


def loaded_latency_svg(
    members: Sequence[str],
    loaded: Mapping[str, Sequence[bool]],
    service: Mapping[str, Sequence[float | None]],
    label: Callable[[str], str],
) -> str:
    """Each member's service times in rounds where another member was loaded vs not.

    A shared backend shows up as a member being slower when its partners are loaded.
    Points are spread horizontally by a fixed pattern (no randomness).
    """

    def draw(fig: Figure) -> None:
        ax = fig.add_subplot()
        any_point = False
        for i, key in enumerate(members):
            others = [k for k in members if k != key]
            with_: list[float] = []
            without: list[float] = []
            for r, s in enumerate(service.get(key, ())):
                if s is None:
                    continue
                (with_ if any(loaded[k][r] for k in others) else without).append(s)
            idle = "partners idle" if others else "service time (one-node flag)"
            for values, dx, color, name in (
                (without, -0.18, "#56B4E9", idle),
                (with_, 0.18, "#D55E00", "partner loaded"),
            ):
                if not values:
                    continue
                any_point = True
                xs = [i + dx + 0.08 * ((j % 7) - 3) / 3 for j in range(len(values))]
                sc = ax.scatter(
                    xs, values, s=14, color=color, alpha=0.8,
                    label=name if i == 0 else None,
                )  # fmt: skip
                sc.set_gid(f"data-{'loaded' if dx > 0 else 'idle'}-{i}")
                med = sorted(values)[len(values) // 2]
                ax.plot([i + dx - 0.12, i + dx + 0.12], [med, med], color="black", lw=2)
        if not any_point:
            ax.set_axis_off()
            ax.text(0.5, 0.5, "no timed results for these nodes", ha="center",
                    transform=ax.transAxes)  # fmt: skip
            return
        ax.set_xticks(range(len(members)), [label(k) for k in members])
        ax.set_ylabel("service time, s (arrival − release − rtt)")
        ax.set_ylim(bottom=0)
        ax.grid(axis="y", alpha=0.3)
        ax.legend(loc="lower left", bbox_to_anchor=(0.0, 1.0), ncols=2, fontsize=8, frameon=False)

    key = _cache_key("loaded", [list(members), loaded, service, [label(k) for k in members]])
    return _render(7.5, 3.2, draw, key)


def _unit(v: float, lo: float, hi: float) -> float:
    return 0.5 if hi <= lo else min(1.0, max(0.0, (v - lo) / (hi - lo)))


def heatmap_svg(
    matrix: Sequence[Sequence[float | None]],
    labels: Sequence[str],
    title: str,
    *,
    vmin: float | None = None,
    vmax: float | None = None,
    fmt: str = "{:.0f}",
    cmap: str = "viridis",
) -> str:
    """A square matrix as coloured cells with their values written in (vector paths)."""
    n = len(labels)

    def draw(fig: Figure) -> None:
        if n == 0:
            _empty(fig, "no nodes")
            return
        ax = fig.add_subplot()
        values = [[math.nan if v is None else float(v) for v in row] for row in matrix]
        mesh = ax.pcolormesh(values, cmap=cmap, vmin=vmin, vmax=vmax, edgecolors="white", lw=1)
        mesh.set_gid("data-heatmap")
        finite = [v for row in values for v in row if not math.isnan(v)]
        lo = vmin if vmin is not None else min(finite, default=0.0)
        hi = vmax if vmax is not None else max(finite, default=1.0)
        for i in range(n):
            for j in range(n):
                v = values[i][j]
                rgba = np.asarray(mesh.cmap(_unit(v, lo, hi)) if not math.isnan(v) else (1, 1, 1))
                r, g, b = (float(c) for c in rgba[:3])
                ink = "black" if 0.299 * r + 0.587 * g + 0.114 * b > 0.5 else "white"
                ax.text(
                    j + 0.5, i + 0.5, "–" if math.isnan(v) else fmt.format(v),
                    ha="center", va="center", color=ink, fontsize=8,
                )  # fmt: skip
        ax.set_xticks([k + 0.5 for k in range(n)], labels, rotation=30, ha="right")
        ax.set_yticks([k + 0.5 for k in range(n)], labels)
        ax.invert_yaxis()
        ax.set_aspect("equal")
        ax.set_title(title)
        fig.colorbar(mesh, ax=ax, shrink=0.8)

    size = 2.6 + 0.45 * n
    key = _cache_key("heatmap", [matrix, list(labels), title, vmin, vmax, fmt, cmap])
    return _render(size + 1.2, size, draw, key)
