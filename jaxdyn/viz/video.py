"""Write frames to a video (MP4 through imageio-ffmpeg's bundled ffmpeg) or a GIF (Pillow)."""

from __future__ import annotations

import os
import warnings
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from jax.typing import ArrayLike


__all__ = ["save_video"]


def save_video(frames: ArrayLike, path: str | os.PathLike, fps: float = 30.0) -> str:
    """Write ``frames (T, H, W, 3) uint8`` to ``path``: ``.mp4`` (H.264, yuv420p: plays in
    browsers and players; needs ``imageio`` and ``imageio-ffmpeg``, which ships its own ffmpeg)
    or ``.gif`` (needs Pillow). Returns ``path``."""
    frames = np.asarray(frames)
    if frames.ndim != 4 or frames.shape[-1] != 3 or frames.dtype != np.uint8 or not len(frames):
        raise ValueError(
            f"save_video: frames must be (T, H, W, 3) uint8 with T >= 1, got {frames.shape} "
            f"{frames.dtype}"
        )
    if not (np.isfinite(fps) and fps > 0):
        raise ValueError(f"save_video: fps must be > 0, got {fps}")
    path = os.fspath(path)
    ext = os.path.splitext(path)[1].lower()
    if ext == ".gif":
        try:
            from PIL import Image
        except ImportError:
            raise ImportError("save_video: GIF needs Pillow: pip install 'jaxdyn[viz]'") from None
        imgs = [Image.fromarray(f) for f in frames]
        imgs[0].save(
            path,
            save_all=True,
            append_images=imgs[1:],
            loop=0,
            duration=max(int(round(1000 / fps)), 20),
        )
        return path
    if ext in (".mp4", ".m4v", ".mov", ".webm"):
        try:
            import imageio.v2 as imageio
            import imageio_ffmpeg  # noqa: F401
        except ImportError:
            raise ImportError(
                "save_video: MP4 needs imageio and imageio-ffmpeg: pip install 'jaxdyn[viz]'"
            ) from None
        H, W = frames.shape[1:3]
        if H % 2 or W % 2:  # yuv420p needs even sizes
            frames = frames[:, : H - H % 2, : W - W % 2]
        codec = "libvpx-vp9" if ext == ".webm" else "libx264"
        with warnings.catch_warnings():  # (ffmpeg is a subprocess: JAX's note about fork)
            warnings.filterwarnings("ignore", message="os.fork", category=RuntimeWarning)
            _write_ffmpeg(imageio, path, frames, fps, codec)
        return path
    raise ValueError(f"save_video: {path!r}: unknown video type {ext!r} (use .mp4 or .gif)")


def _write_ffmpeg(imageio, path, frames, fps, codec):
    kw = dict(fps=fps, codec=codec, macro_block_size=1, pixelformat="yuv420p")
    with imageio.get_writer(path, ffmpeg_log_level="error", **kw) as w:
        for f in frames:
            w.append_data(f)
