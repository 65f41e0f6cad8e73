"""MuJoCo C reference rollouts for the test suite: one ``mj_step`` loop for every test that
compares a jaxdyn simulation with MuJoCo's (tests import it by name: ``tests/`` is on
``sys.path``). Deliberately not in :mod:`oracle` (which imports Pinocchio): MuJoCo is loaded by
the caller, here only when a rollout runs."""

from __future__ import annotations

import numpy as np


def mujoco_rollout(m, steps=None, *, qpos=None, qvel=None, ctrl=None, fields=("qpos",), data=None):
    """MuJoCo C's states after each ``mj_step`` of the ``MjModel`` ``m``.

    The rollout steps ``data`` (an ``MjData`` of ``m``, stepped in place) or a new ``MjData``
    (``qpos0``, at rest); ``qpos`` / ``qvel`` replace its state first; ``ctrl`` (T, nu) sets
    ``d.ctrl`` before each step (``steps`` is then T, else it is required). Returns one array
    ``(steps, ...)`` per entry of ``fields`` -- an ``MjData`` attribute's name (``"qpos"``,
    ``"qvel"``, ...) or a function of the ``MjData`` -- as a tuple in that order."""
    import mujoco

    d = mujoco.MjData(m) if data is None else data
    if qpos is not None:
        d.qpos[:] = qpos
    if qvel is not None:
        d.qvel[:] = qvel
    if ctrl is not None:
        ctrl = np.asarray(ctrl, float)
        steps = len(ctrl) if steps is None else steps
        if ctrl.shape[0] != steps:
            raise ValueError(f"mujoco_rollout: ctrl has {ctrl.shape[0]} rows for {steps} steps")
    if steps is None:
        raise ValueError("mujoco_rollout: give steps or ctrl")
    out = [[] for _ in fields]
    for k in range(steps):
        if ctrl is not None:
            d.ctrl[:] = ctrl[k]
        mujoco.mj_step(m, d)
        for rec, name in zip(out, fields, strict=True):
            rec.append(np.array(name(d) if callable(name) else getattr(d, name)))
    return tuple(np.array(rec) for rec in out)
