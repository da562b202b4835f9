"""The curves of benchmarks/scale.py as PNGs next to its JSON: p50/p99 of each
operation against the number of agents, and the resources (throughput, CPU per
1,000 operations, RSS per session, fds, loop lag), execserver and the reference
on the same axes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only, no display

import matplotlib.pyplot as plt

from benchmarks.scale_agent import OPERATIONS

__all__ = ["plot"]

COLOURS = {"execserver": "tab:blue", "reference": "tab:orange"}


def _series(report: dict[str, Any], kind: str, pick: Any) -> tuple[list[int], list[float]]:
    xs: list[int] = []
    ys: list[float] = []
    for n, entry in sorted(report["levels"].items(), key=lambda item: int(item[0])):
        value = pick(entry[kind])
        if value is not None:
            xs.append(int(n))
            ys.append(value)
    return xs, ys


def _axes_log(ax: Any, title: str, unit: str) -> None:
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_title(title)
    ax.set_xlabel("agents")
    ax.set_ylabel(unit)
    ax.grid(True, which="both", alpha=0.3)


def plot(report: dict[str, Any], stem: Path) -> list[Path]:
    """Writes ``<stem>_latency.png`` and ``<stem>_resources.png``."""
    written: list[Path] = []
    fig, axes = plt.subplots(2, 3, figsize=(15, 8.5))
    for ax, name in zip(axes.flat, OPERATIONS, strict=True):
        for kind, colour in COLOURS.items():
            for key, style in (("p50_ms", "--"), ("p99_ms", "-")):
                xs, ys = _series(report, kind, lambda lv, k=key, op=name: lv["operations"][op][k])
                ax.plot(xs, ys, style, marker="o", color=colour, label=f"{kind} {key[:3]}")
        _axes_log(ax, name, "ms")
    axes.flat[0].legend(fontsize=8)
    fig.suptitle("latency per operation (p50 dashed, p99 solid)")
    fig.tight_layout()
    path = stem.with_name(stem.name + "_latency.png")
    fig.savefig(path, dpi=90)
    plt.close(fig)
    written.append(path)

    panels = [
        ("throughput", "ops/s", lambda lv: lv["throughput_ops_per_s"], None),
        ("server CPU per 1,000 ops", "CPU s", lambda lv: lv["server_cpu_s_per_1k_ops"], None),
        ("server RSS (own processes, peak)", "MB", lambda lv: lv["peak"]["rss_MB"], None),
        (
            "memory per session (RSS solid, PSS dashed)",
            "MB",
            lambda lv: max(lv["rss_per_session_MB"], 1e-3),
            # Runs before the PSS was read have none (_series leaves them out).
            lambda lv: lv.get("pss_per_session_MB"),
        ),
        ("fds (own processes, peak)", "fds", lambda lv: lv["peak"]["fds"], None),
        ("loop lag p99 (initialize probe)", "ms", lambda lv: lv["loop_lag_p99_ms"], None),
    ]
    fig, axes = plt.subplots(2, 3, figsize=(15, 8.5))
    for ax, (title, unit, pick, dashed) in zip(axes.flat, panels, strict=True):
        for kind, colour in COLOURS.items():
            xs, ys = _series(report, kind, pick)
            ax.plot(xs, ys, marker="o", color=colour, label=kind)
            if dashed is not None:
                xs, ys = _series(report, kind, dashed)
                ax.plot(xs, ys, "--", marker="o", color=colour)
        _axes_log(ax, title, unit)
    axes.flat[0].legend(fontsize=8)
    fig.tight_layout()
    path = stem.with_name(stem.name + "_resources.png")
    fig.savefig(path, dpi=90)
    plt.close(fig)
    written.append(path)
    return written
