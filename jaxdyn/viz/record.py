"""Film what a program did: an environment under a policy, a trajectory resampled to a video."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import numpy as np

from .scene import Scene

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from jax import Array
    from jax.typing import ArrayLike

    from .scene import Scene

__all__ = ["env_rollout", "save_rollout"]


def env_rollout(
    env: Any, policy: Callable[[Array, Array], Array], n_steps: int, seed: int = 0
) -> tuple[np.ndarray, Any]:
    """Run ``policy(obs, key) -> action`` on a :mod:`jaxdyn.envs` environment (or any Brax
    environment whose ``pipeline_state`` has ``q``) for ``n_steps`` control steps from
    ``env.reset(PRNGKey(seed))``, in one ``lax.scan``. Returns ``(q (n_steps + 1, nq), state0)``:
    the configurations (the initial one first) and the initial environment state (its
    ``info``, e.g. the reacher's target)."""
    import jax

    key = jax.random.PRNGKey(seed)

    @jax.jit
    def env_rollout(key):  # (named for the compile log; "run" is jaxdyn's eager calls')
        k0, k1 = jax.random.split(key)
        s0 = env.reset(k0)

        def body(s, k):
            s = env.step(s, policy(s.obs, k))
            return s, s.pipeline_state.q

        _, qs = jax.lax.scan(body, s0, jax.random.split(k1, n_steps))
        return jax.numpy.concatenate([s0.pipeline_state.q[None], qs]), s0

    qs, s0 = env_rollout(key)
    return np.asarray(qs, float), s0


def save_rollout(
    scene: Scene | str | os.PathLike,
    qs: ArrayLike,
    path: str | os.PathLike,
    *,
    dt: float,
    fps: float = 30.0,
    width: int = 640,
    height: int = 480,
    camera: Any = None,
    forces: ArrayLike | None = None,
    contact_points: bool = False,
    progress: bool | None = None,
) -> str:
    """Write configurations ``qs (T, nq)`` (or a batch ``(B, T, nq)``), ``dt`` seconds apart,
    to ``path``: ``.mp4`` / ``.gif`` (rendered, resampled to ``fps``: every
    ``round(1 / (fps dt))``-th step and the last), ``.html`` (:func:`export_html`, every step)
    or ``.png`` (the first step). ``forces``: contact forces ``(T, nc, 3)`` drawn as arrows,
    ``contact_points``: the contacts touching the terrain marked (in videos and pages alike).
    Returns ``path``."""
    from .html import export_html
    from .renderer import Camera, render
    from .video import save_video

    if not isinstance(scene, Scene):
        scene = Scene.load(scene)
    qs = np.asarray(qs, float)
    path = os.fspath(path)
    ext = os.path.splitext(path)[1].lower()
    if ext == ".html":  # every step, with the contacts asked for
        export_html(scene, qs, path, dt=dt, forces=forces, contact_points=contact_points)
        return path
    if ext not in (".mp4", ".gif", ".png"):
        raise ValueError(
            f"save_rollout: {path!r}: unknown output type {ext!r} (.mp4, .gif, .html or .png)"
        )
    if not (np.isfinite(dt) and dt > 0 and np.isfinite(fps) and fps > 0):
        raise ValueError(f"save_rollout: dt and fps must be > 0, got {dt}, {fps}")
    T = qs.shape[-2]
    stride = max(1, int(round(1.0 / (fps * dt)))) if ext != ".png" else T
    idx = np.arange(0, T, stride)
    if ext != ".png" and idx[-1] != T - 1:
        idx = np.append(idx, T - 1)
    fs = None if forces is None else np.asarray(forces)[..., idx, :, :]
    frames = render(
        scene,
        qs[..., idx, :],
        width=width,
        height=height,
        camera=camera or Camera(),
        forces=fs,
        contact_points=contact_points,
        progress=progress,
    )
    if ext == ".png":
        from PIL import Image

        Image.fromarray(frames[0]).save(path)
    else:
        save_video(frames, path, fps=1.0 / (stride * dt))
    return path
