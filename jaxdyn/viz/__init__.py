"""See what you simulate: offline frames and videos, a self-contained HTML viewer, a browser
viewer with joint sliders (``jaxdyn view``). Not imported by ``import jaxdyn``.

- :class:`Scene` (:mod:`jaxdyn.viz.scene`): a model, its visual geometry, terrain and contacts;
  :meth:`Scene.load` reads URDF visuals (meshes included) and MJCF geoms;
- :func:`render` / :class:`Renderer` (:mod:`jaxdyn.viz.renderer`): numpy frames through
  MuJoCo's headless OpenGL renderer (EGL / OSMesa), a camera that follows the base, contact
  points and forces, batches on a grid;
- :func:`save_video`: MP4 (imageio-ffmpeg) or GIF (Pillow); :func:`save_rollout`: a
  trajectory to a video / page / image; :func:`env_rollout`: an environment under a policy;
- :func:`export_html` (:mod:`jaxdyn.viz.html`): one HTML file, WebGL, opens offline, time
  slider; :func:`serve` (:mod:`jaxdyn.viz.server`): the same page with joint sliders.

Install the rendering dependencies with ``pip install 'jaxdyn[viz]'``; see docs/viz.md.
"""

from typing import TYPE_CHECKING, Any

from .scene import Geom, Scene, frame_poses, read_mesh
from .video import save_video

if TYPE_CHECKING:  # (imported on first use, below; named here for type checkers)
    from .html import export_html
    from .html import html_page as html_page
    from .record import env_rollout, save_rollout
    from .renderer import Camera, Renderer, render
    from .server import serve


def __getattr__(name: str) -> Any:  # the renderers import MuJoCo / the server on first use
    if name in ("render", "Renderer", "Camera"):
        from . import renderer as _r

        return getattr(_r, name)
    if name in ("export_html", "html_page"):
        from . import html as _h

        return getattr(_h, name)
    if name in ("env_rollout", "save_rollout"):
        from . import record as _rec

        return getattr(_rec, name)
    if name == "serve":
        from . import server as _s

        return _s.serve
    raise AttributeError(f"module 'jaxdyn.viz' has no attribute {name!r}")


__all__ = [
    "Camera",
    "Geom",
    "Renderer",
    "Scene",
    "export_html",
    "frame_poses",
    "read_mesh",
    "env_rollout",
    "render",
    "save_rollout",
    "save_video",
    "serve",
]
