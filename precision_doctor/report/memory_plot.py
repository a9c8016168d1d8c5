"""`memory --plot FILE.svg`: peak memory per GPU against the batch size, each component stacked, the GPU's usable
memory as a line, and where the batch fits, where the estimate's measured error reaches past the GPU, and where it
will not fit. A plain SVG written here: no plotting library."""

from __future__ import annotations

from dataclasses import replace
from html import escape

from ..derive.memory import GIB, MEASURED_UNDERESTIMATE, Breakdown, batch_ranges, estimate
from ..derive.memory_plan import MemoryPlan

WIDTH, HEIGHT = 760, 440
LEFT, RIGHT, TOP, BOTTOM = 70, 200, 40, 60
# (name, colour) bottom to top, one per part of Breakdown.peak_parts(); the middle band is what the step holds at its
# largest: activations and the loss's gradient (or a recomputed layer), else the gradients where they are larger
LAYERS = (
    ("weights", "#4e79a7"),
    ("optimizer state", "#f28e2b"),
    ("fp32 master copy", "#e15759"),
    ("activations / gradients", "#76b7b2"),
    ("CUDA context", "#59a14f"),
    ("allocator reserve", "#bab0ac"),
)


def _stack(b: Breakdown) -> list[int]:
    return [size for _, size in b.peak_parts()]


def _nice_step(raw: float) -> float:
    """1, 2 or 5 times a power of ten, the first at least `raw`: axis ticks people read at a glance."""
    import math

    power = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1
    return next(m * power for m in (1, 2, 5, 10) if m * power >= raw)


def svg_plot(plan: MemoryPlan, title: str) -> str:
    """The plot as SVG text."""
    safe, fits = batch_ranges(plan.checkpoint, plan.shape, plan.budget)
    last = max(8, plan.shape.batch * 2, fits + max(2, fits // 4))
    step = max(1, last // 64)
    batches = list(range(1, last + 1, step))
    stacks = [_stack(estimate(plan.checkpoint, replace(plan.shape, batch=b))) for b in batches]
    top = max(max(sum(s) for s in stacks), plan.budget) * 1.08
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def x(batch: float) -> float:
        return LEFT + (batch - 1) / max(last - 1, 1) * plot_w

    def y(size: float) -> float:
        return TOP + plot_h - size / top * plot_h

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">',
        f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
        f'<text x="{LEFT}" y="22" font-size="14" font-weight="bold">{escape(title)}</text>',
    ]
    # the ranges, behind the stack: fits (even with the measured error), uncertain, will not fit
    regions = (
        (1, safe + 0.5, "#e8f5e9", "fits"),
        (safe + 0.5, fits + 0.5, "#fff8e1", "uncertain"),
        (fits + 0.5, last, "#ffebee", "will not fit"),
    )
    for lo, hi, colour, name in regions:
        lo, hi = max(lo, 1), min(hi, last)
        if hi > lo:
            out.append(
                f'<rect x="{x(lo):.1f}" y="{TOP}" width="{x(hi) - x(lo):.1f}" height="{plot_h}" fill="{colour}">'
                f"<title>{name}</title></rect>"
            )
    below = [0.0] * len(batches)
    for layer, (name, colour) in enumerate(LAYERS):
        above = [below[i] + stacks[i][layer] for i in range(len(batches))]
        points = [f"{x(b):.1f},{y(v):.1f}" for b, v in zip(batches, above, strict=True)]
        points += [f"{x(b):.1f},{y(v):.1f}" for b, v in reversed(list(zip(batches, below, strict=True)))]
        out.append(
            f'<polygon points="{" ".join(points)}" fill="{colour}" fill-opacity="0.85"><title>{name}</title></polygon>'
        )
        below = above
    usable = y(plan.budget)
    out.append(
        f'<line x1="{LEFT}" y1="{usable:.1f}" x2="{LEFT + plot_w}" y2="{usable:.1f}" stroke="black" '
        'stroke-width="2" stroke-dasharray="6,4"/>'
    )
    out.append(
        f'<text x="{LEFT + 4}" y="{usable - 6:.1f}">{escape(plan.gpu.name)}: {plan.budget / GIB:.1f} GiB usable</text>'
    )
    if plan.shape.batch <= last:
        bx = x(plan.shape.batch)
        out.append(f'<line x1="{bx:.1f}" y1="{TOP}" x2="{bx:.1f}" y2="{TOP + plot_h}" stroke="#333" stroke-width="1"/>')
        out.append(f'<text x="{bx + 3:.1f}" y="{TOP + 12}">batch {plan.shape.batch}</text>')
    # axes
    out.append(f'<line x1="{LEFT}" y1="{TOP + plot_h}" x2="{LEFT + plot_w}" y2="{TOP + plot_h}" stroke="black"/>')
    out.append(f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{TOP + plot_h}" stroke="black"/>')
    tick = _nice_step(top / GIB / 5) * GIB
    size = 0.0
    while size <= top:
        out.append(f'<text x="{LEFT - 6}" y="{y(size) + 4:.1f}" text-anchor="end">{size / GIB:g}</text>')
        out.append(f'<line x1="{LEFT - 3}" y1="{y(size):.1f}" x2="{LEFT}" y2="{y(size):.1f}" stroke="black"/>')
        size += tick
    for b in sorted({1, last, *(round(1 + (last - 1) * i / 5) for i in range(6))}):
        out.append(f'<text x="{x(b):.1f}" y="{TOP + plot_h + 16}" text-anchor="middle">{b}</text>')
    out.append(f'<text x="{LEFT + plot_w / 2}" y="{HEIGHT - 18}" text-anchor="middle">per-GPU batch size</text>')
    out.append(
        f'<text x="16" y="{TOP + plot_h / 2}" transform="rotate(-90 16 {TOP + plot_h / 2})" '
        'text-anchor="middle">peak memory per GPU (GiB)</text>'
    )
    # legend: the layers, then the ranges
    lx, ly = LEFT + plot_w + 16, TOP + 6
    for i, (name, colour) in enumerate(reversed(LAYERS)):
        out.append(f'<rect x="{lx}" y="{ly + i * 18}" width="12" height="12" fill="{colour}"/>')
        out.append(f'<text x="{lx + 18}" y="{ly + i * 18 + 10}">{escape(name)}</text>')
    ly += len(LAYERS) * 18 + 14
    ranges = (
        ("#e8f5e9", f"fits: up to {safe}"),
        (
            "#fff8e1",
            "uncertain: none" if fits <= safe else f"uncertain: {safe + 1}" + (f"-{fits}" if fits > safe + 1 else ""),
        ),
        ("#ffebee", f"will not fit: {fits + 1} and up"),
    )
    for i, (colour, name) in enumerate(ranges):
        out.append(f'<rect x="{lx}" y="{ly + i * 18}" width="12" height="12" fill="{colour}" stroke="#999"/>')
        out.append(f'<text x="{lx + 18}" y="{ly + i * 18 + 10}">{escape(name)}</text>')
    out.append(f'<text x="{lx}" y="{ly + 3 * 18 + 14}" font-size="10">uncertain: the tensors fit, the</text>')
    out.append(
        f'<text x="{lx}" y="{ly + 3 * 18 + 27}" font-size="10">'
        f"estimate +{MEASURED_UNDERESTIMATE:.0%} (measured error) not</text>"
    )
    out.append("</svg>")
    return "\n".join(out) + "\n"
