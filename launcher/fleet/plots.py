"""The fleet section's figures (matplotlib, Agg): per metric and cap, a heat
map of nodes x GPU index and the distribution over the fleet."""
from __future__ import annotations

from pathlib import Path

from hpcai.launcher.fleet.metrics import METRICS

# More nodes than this in one heat map: rows become unreadable; the worst are kept.
HEATMAP_MAX_NODES = 64


def _pyplot():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


# Characters of a 12-point title per inch of figure (DejaVu Sans averages ~0.6 em a glyph).
TITLE_CHARS_PER_INCH = 7


def fitted_title(title: str, width_in: float) -> str:
    """The title wrapped onto lines as wide as the figure: a one- or two-GPU node's map is
    three inches wide, and its title was cut off at both sides."""
    import textwrap

    return textwrap.fill(title, max(16, int(width_in * TITLE_CHARS_PER_INCH)))


def _values(doc: dict, cap: str, metric: str) -> list[tuple[str, int, float, float]]:
    """(node, index, value, z) of every GPU with the figure at this cap."""
    out = []
    for g in doc["gpus"]:
        fig = g["caps"].get(cap)
        z = g["z"].get(cap, {}).get(metric)
        if fig and fig.get(metric) is not None and z is not None:
            out.append((g["node"], g["index"], fig[metric], z))
    return out


def heatmap(folder: Path, doc: dict, cap: str, metric: str) -> Path | None:
    rows = _values(doc, cap, metric)
    if not rows:
        return None
    plt = _pyplot()
    worst: dict[str, float] = {}
    for node, _, _, z in rows:
        worst[node] = max(worst.get(node, 0.0), abs(z))
    nodes = sorted(worst, key=lambda n: -worst[n])[:HEATMAP_MAX_NODES]
    nodes.sort()
    indices = sorted({i for _, i, _, _ in rows})
    grid = [[float("nan")] * len(indices) for _ in nodes]
    place = {n: k for k, n in enumerate(nodes)}
    for node, index, _, z in rows:
        if node in place:
            grid[place[node]][indices.index(index)] = z
    limit = max(doc["settings"]["threshold"] * 1.5, 1.0)
    width_in = 2 + 0.5 * len(indices)
    fig, ax = plt.subplots(figsize=(width_in, 1.5 + 0.25 * len(nodes)))
    image = ax.imshow(grid, cmap="coolwarm", vmin=-limit, vmax=limit, aspect="auto")
    ax.set_xticks(range(len(indices)), [str(i) for i in indices])
    ax.set_yticks(range(len(nodes)), nodes)
    ax.set_xlabel("GPU index")
    label = METRICS[metric][0]
    shown = "" if len(worst) <= HEATMAP_MAX_NODES else f" ({len(nodes)} nodes most out of line)"
    ax.set_title(fitted_title(f"{label} at {cap} W: robust z-score{shown}", width_in))
    # The formula did not fit beside a one-node map (cut off); fleet.md and the docs give it.
    fig.colorbar(image, ax=ax, label="robust z")
    return _save(plt, fig, folder, f"heatmap-{metric}-{cap}W")


def distribution(folder: Path, doc: dict, metric: str) -> Path | None:
    caps = [c for c in doc["spread"] if metric in doc["spread"][c]]
    if not caps:
        return None
    plt = _pyplot()
    data = [[v for _, _, v, _ in _values(doc, cap, metric)] for cap in caps]
    fig, ax = plt.subplots(figsize=(2 + 1.2 * len(caps), 4))
    ax.boxplot(data, whis=(1, 99), showfliers=True)
    ax.set_xticks(range(1, len(caps) + 1), [f"{c} W" for c in caps])
    label, unit = METRICS[metric][0], METRICS[metric][1]
    ax.set_ylabel(f"{label} ({unit})")
    ax.set_xlabel("power cap per GPU")
    ax.set_title(f"{label} over the fleet, per cap")
    return _save(plt, fig, folder, f"distribution-{metric}")


def _save(plt, fig, folder: Path, name: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.png"
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def make_plots(folder: Path, doc: dict) -> list[Path]:
    made = []
    for metric in METRICS:
        for cap in doc["spread"]:
            path = heatmap(folder, doc, cap, metric)
            if path:
                made.append(path)
        path = distribution(folder, doc, metric)
        if path:
            made.append(path)
    return made
