"""The training examples show what they did: a learning curve PNG and a video of the trained
policy, and their progress printed as they train (``examples/train_reacher_apg.py`` on a tiny
budget; the trajectory-optimisation examples' outputs come from ``examples/_outputs.py``,
checked here on a stand-in result)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent


def _run(args, tmp_path, timeout=1800):
    env = dict(os.environ, PYTHONPATH=str(ROOT))  # this checkout's jaxdyn
    return subprocess.run(
        [sys.executable, *args], cwd=ROOT / "examples", env=env, capture_output=True,
        text=True, timeout=timeout,
    )  # fmt: skip


@pytest.mark.slow  # (compiles the gradient of the rollout and the environment's step)
def test_reacher_apg_saves_curve_and_video(tmp_path):
    from PIL import Image

    png, gif = tmp_path / "curve.png", tmp_path / "policy.gif"
    r = _run(["train_reacher_apg.py", "--iterations", "2", "--batch", "2", "--horizon", "5",
              "--out", str(png), "--video", str(gif)], tmp_path)  # fmt: skip
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    out = r.stdout
    assert "iteration    0" in out and "iteration    1" in out  # progress while training
    assert f"learning curve: {png}" in out and f"policy video: {gif}" in out
    with Image.open(png) as im:
        assert im.size[0] > 300 and np.asarray(im.convert("L")).std() > 5
    with Image.open(gif) as im:
        assert im.n_frames > 10


@pytest.mark.slow  # (renders a video: a renderer and a kinematics compile, tens of seconds)
def test_trajopt_outputs(tmp_path, monkeypatch):
    """``_outputs.save_solution``: the solution's video and the cost per iteration plot."""
    pytest.importorskip("matplotlib")
    from PIL import Image

    sys.path.insert(0, str(ROOT / "examples"))
    try:
        import _outputs
    finally:
        sys.path.remove(str(ROOT / "examples"))
    from types import SimpleNamespace

    from jaxdyn import viz

    monkeypatch.setattr(_outputs, "FIGURES", tmp_path)
    scene = viz.Scene.load("arm7")
    xs = np.zeros((4, 2 * scene.model.nq))
    xs[:, 1] = np.linspace(0, 1, 4)
    cost = np.array([10.0, 1.0, 0.5, np.nan])  # (NaN after the last iteration)
    res = SimpleNamespace(xs=xs, log={"cost": cost})
    _outputs.save_solution(lambda: scene, res, "t", 0.5, others={"Adam": [20.0, 5.0]})
    with Image.open(tmp_path / "t_cost.png") as im:
        assert np.asarray(im.convert("L")).std() > 5
    assert (tmp_path / "t.mp4").stat().st_size > 0
