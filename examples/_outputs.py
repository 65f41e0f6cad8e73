"""What the trajectory-optimisation examples save besides their figure: a video of the solution
(``jaxdyn.viz``, MuJoCo's headless renderer; ``pip install '.[viz]'``) and the cost per
solver iteration (matplotlib)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

FIGURES = Path(__file__).resolve().parent / "figures"


def _save_video(build, name, dt):
    """``figures/<name>.mp4`` of ``build(viz) -> (viz scene, configurations (T, nq))``; a
    printed reason instead where jaxdyn.viz's dependencies or OpenGL are missing."""
    FIGURES.mkdir(parents=True, exist_ok=True)
    try:
        from jaxdyn import viz

        vscene, qs = build(viz)
        video = FIGURES / f"{name}.mp4"
        viz.save_rollout(vscene, qs, video, dt=dt, progress=True)
        print(f"saved {video}")
    except ImportError as e:
        print(f"no video ({e}; pip install '.[viz]')")
    except RuntimeError as e:  # no OpenGL (EGL / OSMesa) on this machine: see docs/viz.md
        print(f"no video: {e}")


def _pyplot(what):
    """matplotlib's pyplot on the Agg backend, or ``None`` (printed: no ``what``)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"matplotlib missing: no {what}")
        return None
    return plt


def save_solution(scene, res, name, dt, title="", others=None):
    """``figures/<name>.mp4``: ``res.xs``' configurations; ``figures/<name>_cost.png``: the
    cost after each FDDP iteration (``res.log["cost"]``), and ``others`` (``{label: costs per
    iteration}``, another solver's) on the same axes. ``scene``: a
    :class:`jaxdyn.viz.Scene`, or a callable building one (called only when jaxdyn.viz's
    dependencies are installed)."""

    def build(viz):
        vscene = scene() if callable(scene) else scene
        return vscene, np.asarray(res.xs)[:, : vscene.model.nq]

    _save_video(build, name, dt)
    plt = _pyplot("cost plot")
    if plt is None:
        return
    cost = np.asarray(res.log["cost"], float)
    cost = cost[np.isfinite(cost)]
    fig, ax = plt.subplots(figsize=(5.5, 3.4))
    ax.semilogy(np.arange(1, len(cost) + 1), cost, "o-", ms=3, label="FDDP")
    for label, c in (others or {}).items():
        c = np.asarray(c, float)
        ax.semilogy(np.arange(1, len(c) + 1), c, "-", lw=1, label=label)
    if others:
        ax.set_xscale("log")
        ax.legend(fontsize=8)
    ax.set_xlabel("iteration")
    if not others:
        ax.xaxis.set_major_locator(plt.MaxNLocator(integer=True))
    ax.set_ylabel("cost")
    ax.set_title(title or f"{name}: cost per iteration", fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    path = FIGURES / f"{name}_cost.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print(f"saved {path}")


def save_scene_rollout(scene, qs, name, dt, curves, ylabel="", title=""):
    """``figures/<name>.mp4``: the configurations ``qs (T, nq)`` of a :class:`jaxdyn.sim.Scene`
    (its collision shapes drawn, on the model's stick figure); ``figures/<name>.png``:
    ``curves`` (``{label: values (T,)}``) against time."""

    def build(viz):
        geoms = viz.scene.stick_geoms(scene.model)
        for gname, frame, kind, size, R, p, verts in scene.shapes():
            f = -1 if frame is None else scene.model.frame_index(frame)
            if kind == "mesh":  # its hull, as triangles
                from scipy.spatial import ConvexHull

                hull = ConvexHull(verts)
                g = viz.Geom(f, "mesh", (1.0,), R, p, vertices=verts, faces=hull.simplices)
            else:
                n = {"sphere": 1, "capsule": 2, "cylinder": 2}.get(kind, 3)
                g = viz.Geom(f, kind, size[:n], R, p, rgba=(0.3, 0.6, 0.9, 1.0), name=gname)
            geoms.append(g)
        return viz.Scene(scene.model, geoms, terrain=scene.terrain), np.asarray(qs)

    _save_video(build, name, dt)
    plt = _pyplot("plot")
    if plt is None:
        return
    fig, ax = plt.subplots(figsize=(5.5, 3.4))
    for label, y in curves.items():
        y = np.asarray(y, float)
        ax.plot(np.arange(len(y)) * dt, y, label=label)
    ax.set_xlabel("time (s)")
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=8)
    ax.set_title(title or name, fontsize=9)
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    path = FIGURES / f"{name}.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print(f"saved {path}")
