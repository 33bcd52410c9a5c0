"""Label placement for the figures (pure geometry on a drawn matplotlib figure, in display pixels): a 1-D
dodge of points along a log axis (:func:`dodge_1d`), and :func:`place_labels`, which sets one label beside each
point where it overlaps no other label, leader line or obstacle and stays inside the axes, trying a few fixed
orders and keeping the cheapest layout. Deterministic, so that two renders are byte-identical.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.axes import Axes
    from matplotlib.backends.backend_agg import FigureCanvasAgg, RendererAgg
    from matplotlib.figure import Figure


def dodge_1d(points: list[tuple[str, float]], sep: float) -> dict[str, float]:
    """1-D dodge: keys with log-positions ``points`` (sorted) moved apart to at least ``sep``, each cluster
    kept centred on its own mean.  Deterministic."""
    clusters: list[list[tuple[str, float]]] = []
    for key, x in points:
        if clusters:
            last = clusters[-1]
            centre = sum(p for _, p in last) / len(last)
            left = centre - sep * (len(last) - 1) / 2
            if left + sep * len(last) - x < sep - 1e-12 and x - (left + sep * (len(last) - 1)) < sep:
                last.append((key, x))
                continue
        clusters.append([(key, x)])
    # merge clusters that still overlap after spreading
    merged = True
    while merged:
        merged = False
        for i in range(len(clusters) - 1):
            a, b = clusters[i], clusters[i + 1]
            ca, cb = sum(p for _, p in a) / len(a), sum(p for _, p in b) / len(b)
            if (cb - sep * (len(b) - 1) / 2) - (ca + sep * (len(a) - 1) / 2) < sep:
                clusters[i : i + 2] = [a + b]
                merged = True
                break
    out: dict[str, float] = {}
    for cl in clusters:
        centre = sum(p for _, p in cl) / len(cl)
        for k, (key, _) in enumerate(cl):
            out[key] = centre + sep * (k - (len(cl) - 1) / 2)
    return out


LEADER_MIN = 8.0  # pt: a label further than this from its point gets a leader line


def _gap(bb: Any, px: float, py: float) -> float:
    """Distance from the point (px, py) to the box bb (0 inside)."""
    return math.hypot(max(bb.x0 - px, 0, px - bb.x1), max(bb.y0 - py, 0, py - bb.y1))


def _box_hits(box: tuple[float, float, float, float], arr: Any) -> int:
    """How many of the boxes ``arr`` (N x 4: x0, y0, x1, y1) the box (x0, y0, x1, y1) overlaps."""
    if not len(arr):
        return 0
    return int(((arr[:, 0] < box[2]) & (box[0] < arr[:, 2]) & (arr[:, 1] < box[3]) & (box[1] < arr[:, 3])).sum())


def _seg_hits(p: tuple[float, float], q: tuple[float, float], arr: Any) -> int:
    """How many of the boxes ``arr`` (N x 4) the segment p-q passes through (sampled at 33 points)."""
    import numpy as np

    if not len(arr):
        return 0
    t = np.linspace(0.0, 1.0, 33)[:, None]
    x, y = p[0] + (q[0] - p[0]) * t, p[1] + (q[1] - p[1]) * t
    inside = (arr[None, :, 0] <= x) & (x <= arr[None, :, 2]) & (arr[None, :, 1] <= y) & (y <= arr[None, :, 3])
    return int(inside.any(axis=0).sum())


def _seg_seg(
    p1: tuple[float, float], p2: tuple[float, float], q1: tuple[float, float], q2: tuple[float, float]
) -> bool:
    """Whether two segments cross (proper intersection)."""

    def orient(a: tuple[float, float], b: tuple[float, float], c: tuple[float, float]) -> float:
        return (b[0] - a[0]) * (c[1] - a[1]) - (b[1] - a[1]) * (c[0] - a[0])

    return (orient(p1, p2, q1) * orient(p1, p2, q2) < 0) and (orient(q1, q2, p1) * orient(q1, q2, p2) < 0)


def _leader_start(bb: Any, px: float, py: float) -> tuple[float, float]:
    """Where a leader from box bb towards (px, py) leaves the box (its edge on the line from the centre)."""
    cx, cy = (bb.x0 + bb.x1) / 2, (bb.y0 + bb.y1) / 2
    dx, dy = px - cx, py - cy
    t = min((bb.width / 2) / abs(dx) if dx else math.inf, (bb.height / 2) / abs(dy) if dy else math.inf, 1.0)
    return cx + dx * t, cy + dy * t


def _plan_labels(
    items: list[tuple[float, float, float, float, Any]], order: list[int], obstacles: list[Any], ax_box: Any, s: float
) -> tuple[float, dict[int, Any]]:
    """Greedy placement of label boxes in ``order``; items are (px, py, w, h, near) in display pixels.
    Returns (cost, {item index: box}); cost counts collisions heavily, then the leaders' length."""
    import numpy as np
    from matplotlib.transforms import Bbox

    pad = 2.0 * s
    obs = np.array([[o.x0, o.y0, o.x1, o.y1] for o in obstacles], dtype=float).reshape(-1, 4)
    boxes: dict[int, Any] = {}
    placed = np.zeros((0, 4))
    leaders: list[tuple[tuple[float, float], tuple[float, float]]] = []
    lead_pts = np.zeros((0, 4))  # sampled leader points as tiny boxes
    cost = 0.0
    for idx in order:
        px, py, w, h, near = items[idx]
        others = (
            obs[~((obs[:, 0] < near.x1) & (near.x0 < obs[:, 2]) & (obs[:, 1] < near.y1) & (near.y0 < obs[:, 3]))]
            if len(obs)
            else obs
        )
        best = None
        g: float
        for g in (3, 8, 16, 28, 44, 64, 90):
            g *= s
            cands = (
                (near.x1 + g, py - h / 2),
                (near.x0 - g - w, py - h / 2),  # right, left
                (px - w / 2, near.y1 + g),
                (px - w / 2, near.y0 - g - h),  # above, below
                (near.x1 + g, near.y1 + g - h / 2),
                (near.x1 + g, near.y0 - g - h / 2),  # right, up/down
                (near.x0 - g - w, near.y1 + g - h / 2),
                (near.x0 - g - w, near.y0 - g - h / 2),
                (px, near.y1 + g),
                (px - w, near.y1 + g),
                (px, near.y0 - g - h),
                (px - w, near.y0 - g - h),
            )
            for i, (x0, y0) in enumerate(cands):
                inside = x0 >= ax_box.x0 and x0 + w <= ax_box.x1 and y0 >= ax_box.y0 and y0 + h <= ax_box.y1
                grown = (x0 - pad, y0 - pad, x0 + w + pad, y0 + h + pad)
                hits = _box_hits(grown, obs) + _box_hits(grown, placed) + _box_hits(grown, lead_pts)
                if best is not None and (not inside, hits) > best[0][:2]:
                    continue
                bb = Bbox.from_bounds(x0, y0, w, h)
                length = 0.0
                if _gap(bb, px, py) > LEADER_MIN * s:
                    start = _leader_start(bb, px, py)
                    length = math.hypot(start[0] - px, start[1] - py)
                    grown_placed = placed + np.array([-pad, -pad, pad, pad]) if len(placed) else placed
                    hits += _seg_hits(start, (px, py), grown_placed) + _seg_hits(start, (px, py), others)
                    hits += sum(_seg_seg(start, (px, py), p, q) for p, q in leaders)
                score = (not inside, hits, g, i)
                if best is None or score < best[0]:
                    best = (score, bb, length)
            assert best is not None  # set by the first candidate
            if best[0][:2] == (False, 0):
                break
        assert best is not None
        (outside, hits, _, _), bb, length = best
        boxes[idx] = bb
        placed = np.vstack([placed, [bb.x0, bb.y0, bb.x1, bb.y1]])
        cost += 1e6 * outside + 1e4 * hits + length
        if length:
            start = _leader_start(bb, px, py)
            leaders.append((start, (px, py)))
            t = np.linspace(0.0, 1.0, 16)[1:-1, None]
            xs, ys = start[0] + (px - start[0]) * t, start[1] + (py - start[1]) * t
            lead_pts = np.vstack([lead_pts, np.hstack([xs - 1, ys - 1, xs + 1, ys + 1])])
    return cost, boxes


def place_labels(
    fig: Figure, ax: Axes, anchors: list[tuple[str, float, float, Any]], obstacles: list[Any], fontsize: float = 7.0
) -> list[Any]:
    """Place one label per anchor (text, x, y in data coords, display Bbox of what it names) beside that box,
    nearest first, where it overlaps no other label, leader or obstacle (display Bboxes) and stays inside the
    axes; a label set away from its point gets a leader line, and leaders do not cross.  A few fixed orders of
    placement are tried and the cheapest layout kept: deterministic (pure geometry)."""
    from matplotlib.text import Text

    renderer = agg_renderer(fig)
    ax_box = ax.get_window_extent(renderer)
    s = fig.dpi / 72
    items = []
    for text, x, y, near in anchors:
        px, py = ax.transData.transform((x, y))
        probe = ax.annotate(
            text, (x, y), xytext=(0, 0), textcoords="offset points", ha="left", va="bottom", fontsize=fontsize
        )
        probe.update_positions(renderer)
        tb = Text.get_window_extent(probe, renderer)
        probe.remove()
        items.append((float(px), float(py), tb.width, tb.height, near))
    n = len(items)
    orders = [
        list(range(n)),
        list(reversed(range(n))),
        sorted(range(n), key=lambda i: (-items[i][1], i)),
        sorted(range(n), key=lambda i: (items[i][1], i)),
    ]
    best = min(
        (_plan_labels(items, o, obstacles, ax_box, s) + (k,) for k, o in enumerate(orders)), key=lambda r: (r[0], r[2])
    )
    boxes = best[1]
    placed = []
    for idx, (text, x, y, _) in enumerate(anchors):
        px, py = items[idx][0], items[idx][1]
        bb = boxes[idx]
        leader = (
            {"arrowstyle": "-", "color": "#888888", "linewidth": 0.6, "shrinkA": 0, "shrinkB": 2}
            if _gap(bb, px, py) > LEADER_MIN * s
            else None
        )
        placed.append(
            ax.annotate(
                text,
                (x, y),
                xytext=((bb.x0 - px) / s, (bb.y0 - py) / s),
                textcoords="offset points",
                ha="left",
                va="bottom",
                fontsize=fontsize,
                zorder=6,
                arrowprops=leader,
                bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.85, "pad": 0.5},
            )
        )
    return placed


def agg_renderer(fig: Figure) -> RendererAgg:
    """The renderer of a figure (every figure here is drawn on FigureCanvasAgg)."""
    return cast("FigureCanvasAgg", fig.canvas).get_renderer()
