"""jaxdyn across processes (``jaxdyn.distributed``): two local processes joined on the loopback
address with JAX's Gloo CPU collectives, 2 CPU devices each (a mesh of 4 devices over 2
processes), against the one-process run.

Each test launches this file as the worker script (``python tests/test_distributed.py CASE``,
:func:`jaxdyn.distributed.launch`), bounded by a timeout: on failure the launcher ends every
process. The workers compute their own one-process references (``jax.jit(jax.vmap(...))`` of
the whole batch on one local device: the program a single process runs), so each launch
compiles both.
"""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
TIMEOUT = 300  # seconds for a launch of two processes (compiling on a loaded 2-core machine)

BOX = """<robot name="box"><link name="box"><inertial><mass value="2.0"/>
  <inertia ixx="0.0417" iyy="0.0667" izz="0.0833" ixy="0" ixz="0" iyz="0"/></inertial></link>
</robot>"""


# ----------------------------------------------------------------------------- worker side
def _box_setup(mass=2.0):
    import jax.numpy as jnp

    import jaxdyn
    from jaxdyn import sim

    model = jaxdyn.load_urdf(BOX.replace('"2.0"', f'"{mass}"'), floating_base=True)
    cs = sim.contact_set(model, sim.Box("box", (0.4, 0.3, 0.2)))
    cfg = sim.SimConfig(dt=2e-3, contact=sim.Compliant(), contacts=cs, actuator=sim.Torque(dofs=()))
    return model, cfg, jnp


def _box_batch(B, seed=0):
    """B initial states of the box, tilted and spinning, its lowest corners in the ground."""
    rng = np.random.default_rng(seed)
    q = np.zeros((B, 7))
    q[:, 2] = 0.095 + 0.005 * rng.random(B)
    axis = rng.standard_normal((B, 3))
    axis /= np.linalg.norm(axis, axis=1, keepdims=True)
    ang = 0.3 * rng.random(B)
    q[:, 3] = np.cos(ang / 2)  # q = [x, y, z, qw, qx, qy, qz]
    q[:, 4:7] = axis * np.sin(ang / 2)[:, None]
    v = 0.5 * rng.standard_normal((B, 6))
    return q, v


def _expect_error(fn, text):
    try:
        fn()
    except ValueError as e:
        assert text in str(e), str(e)
        return str(e)
    raise AssertionError(f"no error (expected one saying {text!r})")


def case_main(tmp):
    """Rollout with contact, bad input, solve_sharded, checkpointed rollout (one launch)."""
    import jax

    from jaxdyn import distributed as dist
    from jaxdyn import sim

    dist.initialize()
    jax.config.update("jax_enable_x64", True)
    me, P = jax.process_index(), jax.process_count()
    assert P == 2 and jax.device_count() == 4 and jax.local_device_count() == 2, jax.devices()
    model, cfg, jnp = _box_setup()
    mesh = dist.global_mesh()
    T, B = 24, 4  # global batch: one sample per device
    q, v = _box_batch(B)
    lo, hi = me * B // P, (me + 1) * B // P  # this process's share
    U = np.zeros((B, T, 0))

    # (1) the batched rollout with contact split over the 4 devices of the 2 processes
    traj = dist.rollout(model, sim.State(q[lo:hi], v[lo:hi]), U[lo:hi], cfg=cfg, mesh=mesh)
    assert traj.q.shape == (B, T, 7) and len(traj.q.sharding.device_set) == 4
    assert {s.data.shape for s in traj.q.addressable_shards} == {(1, T, 7)}
    got = dist.gather(traj)
    f = jax.jit(jax.vmap(lambda s, u: sim.rollout(model, s, u, cfg=cfg)))
    ref = f(sim.State(jnp.asarray(q), jnp.asarray(v), jnp.zeros(B)), jnp.asarray(U))
    np.testing.assert_allclose(got.q, np.asarray(ref.q), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got.v, np.asarray(ref.v), rtol=1e-12, atol=1e-11)
    # contact took part: the centre of mass (the base origin) is not where free fall takes it
    # (v = [angular; linear] in base coordinates: the world's vertical velocity is R(q) v_lin)
    w, x, y, z = q[:, 3:7].T
    Rz = np.stack([2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)], 1)
    t = 2e-3 * T
    z_free = q[:, 2] + np.sum(Rz * v[:, 3:], 1) * t - 9.81 * t * t / 2
    lift = got.q[:, -1, 2] - z_free
    print("lift over free fall", lift, flush=True)
    assert lift.min() > 1e-4, lift  # (float64 agreement is 1e-12: any contact shows)
    print("rollout OK", flush=True)

    # (3) bad input: an error on every process, the processes still in step afterwards
    msgs = [
        _expect_error(  # different batch sizes
            lambda: dist.to_global(np.zeros((2 + 2 * me, 3)), mesh), "batches of different sizes"
        ),
        _expect_error(  # 3 + 3 samples over 4 devices
            lambda: dist.to_global(np.zeros((3, 3)), mesh), "not a multiple of the mesh's 4"
        ),
        _expect_error(  # a model that differs on process 1
            lambda: dist.rollout(
                _box_setup(2.0 + me)[0], sim.State(q[lo:hi], v[lo:hi]), U[lo:hi], cfg=cfg
            ),
            "rollout: the model: differs between processes: process(es) [1]",
        ),
        _expect_error(  # a configuration that differs (the time step)
            lambda: dist.assert_same("cfg", sim.SimConfig(dt=1e-3 * (1 + me))), "cfg: differs"
        ),
    ]
    dist.assert_same("the models", model)  # equal ones pass
    print("bad input OK:", *msgs, sep="\n  ", flush=True)

    # (5) a checkpointed rollout (segments of 12 steps): equal to the uninterrupted one; a run
    # preempted during its second segment resumes from the saved one
    stem = os.path.join(tmp, "roll")
    args = (model, sim.State(q[lo:hi], v[lo:hi]), U[lo:hi])
    full = dist.gather(dist.rollout(*args, cfg=cfg, checkpoint=stem, segment=12))
    np.testing.assert_allclose(full.q, got.q, rtol=1e-12, atol=1e-12)
    saved = sorted(p for p in os.listdir(tmp) if f"process{me}-of-2" in p)
    assert len(saved) == 2, saved  # segments 0-11, 12-23
    # the preemption: process 0 lost its last segment, so both redo it from the first one,
    # which they read back: marked (the boxes moved 1 m along x, which the flat ground does not
    # notice) to see that it is read, and that the second segment continues from it
    if me == 0:
        os.remove(os.path.join(tmp, saved[-1]))
    like = jax.tree.map(lambda x: x[lo:hi, :12], full)
    first = dist.load(stem + ".segment000000", like)
    dist.save(stem + ".segment000000", sim.State(first.q + np.eye(7)[0], first.v, first.t))
    again = dist.gather(dist.rollout(*args, cfg=cfg, checkpoint=stem, segment=12))
    shifted = full.q + np.eye(7)[0]
    np.testing.assert_array_equal(again.q[:, :12], shifted[:, :12])  # read back as saved
    np.testing.assert_allclose(again.q[:, 12:], shifted[:, 12:], rtol=1e-12, atol=1e-11)
    np.testing.assert_allclose(again.v, full.v, rtol=1e-12, atol=1e-11)
    assert len([p for p in os.listdir(tmp) if f"process{me}-of-2" in p]) == 2
    print("checkpoint OK", flush=True)
    print("ALL OK", flush=True)


def case_trajopt():
    """solve_sharded over the 4 devices of the 2 processes."""
    import jax
    import jax.numpy as jnp

    from jaxdyn import distributed as dist

    dist.initialize()
    jax.config.update("jax_enable_x64", True)
    me = jax.process_index()
    # (4) a batch of trajectory problems over every device (5 problems: padded to 8)
    from jaxdyn import robots
    from jaxdyn.trajopt import costs as C
    from jaxdyn.trajopt import ddp

    pm = robots.load("double_pendulum").with_armature(0.01)
    goal = jnp.array([1.4, -0.6, 0.0, 0.0])
    run = C.Cost(
        (
            C.Term(C.StateRegularization(goal), 1e-1),
            C.Term(C.ControlRegularization(jnp.zeros(2)), 1e-3),
        )
    )
    term = C.Cost((C.Term(C.StateRegularization(goal), 1e2),))
    x0s = np.random.default_rng(1).uniform(-0.5, 0.5, (5, 4))
    problems = jax.vmap(lambda x0: ddp.Problem(pm, x0, run, term, 0.01, 20))(jnp.asarray(x0s))
    res = dist.solve_sharded(problems, max_iter=50)
    ref = jax.jit(jax.vmap(lambda p: ddp.fddp(p, max_iter=50)))(problems)
    np.testing.assert_array_equal(res.status, np.asarray(ref.status))
    np.testing.assert_array_equal(res.iterations, np.asarray(ref.iterations))
    np.testing.assert_allclose(res.cost, np.asarray(ref.cost), rtol=1e-10)
    np.testing.assert_allclose(res.us, np.asarray(ref.us), rtol=1e-8, atol=1e-10)
    import equinox as eqx

    moved = eqx.tree_at(lambda p: p.x0, problems, problems.x0 + me * 1e-3)
    _expect_error(
        lambda: dist.solve_sharded(moved, max_iter=50),
        "solve_sharded: the problems: differs between processes",
    )
    print("ALL OK", flush=True)


def case_ppo():
    """Brax PPO on the reacher over the 4 devices of the 2 processes (a tiny budget)."""
    import jax

    from jaxdyn import distributed as dist
    from jaxdyn import envs

    from _tiny_ppo import tiny_ppo_kwargs

    dist.initialize()
    env = envs.make("reacher")
    seen = []
    _, params, _ = dist.train_ppo(
        env,
        **tiny_ppo_kwargs(
            run_evals=False,  # (Brax evaluates on process 0 only: see docs/distributed.md)
            progress_fn=lambda step, m: seen.append(step),
        ),
    )
    leaves = jax.tree_util.tree_leaves(params)
    assert leaves and all(np.isfinite(np.asarray(x)).all() for x in leaves)
    # the gradients were averaged over every device: each process ends with the same policy
    dist.assert_same("the trained parameters", jax.tree_util.tree_map(np.asarray, params))
    # and num_envs not a multiple of the 4 devices is refused on both processes
    _expect_error(lambda: dist.train_ppo(env, num_envs=6), "num_envs = 6 is not a multiple")
    print("ALL OK", flush=True)


def case_value_check():
    """Process 1's share holds a state that is not finite: its device's value check fails,
    and the run ends with the check's message (process 0 would otherwise wait in the gather)."""
    import jax

    from jaxdyn import distributed as dist
    from jaxdyn import sim

    dist.initialize()
    jax.config.update("jax_enable_x64", True)
    me = jax.process_index()
    model, cfg, _ = _box_setup()
    q, v = _box_batch(4)
    if me == 1:
        v[3, 2] = np.nan
    lo, hi = 2 * me, 2 * me + 2
    traj = dist.rollout(model, sim.State(q[lo:hi], v[lo:hi]), np.zeros((2, 5, 0)), cfg=cfg)
    dist.gather(traj)
    print("no error", flush=True)


if __name__ == "__main__":
    from jaxdyn import distributed as _dist

    case = sys.argv[1]
    if case == "main":
        _dist.main(case_main, sys.argv[2])
    elif case == "trajopt":
        _dist.main(case_trajopt)
    elif case == "ppo":
        _dist.main(case_ppo)
    elif case == "value_check":
        _dist.main(case_value_check)
    else:
        raise SystemExit(f"unknown case {case!r}")


# ----------------------------------------------------------------------------- test side
def _launch(*args, check=True):
    from jaxdyn import distributed as dist

    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(HERE)] + sys.path)
    return dist.launch(
        [__file__, *args], 2, local_cpu_devices=2, timeout=TIMEOUT, env=env, check=check
    )


def test_two_processes_equal_one(tmp_path):
    """Two processes x 2 CPU devices: a batched rollout with compliant contact split over the
    4 devices equals the one-process run to rounding; mismatched batch sizes, a batch not
    divisible by the 4 devices and a model or configuration that differs between processes
    raise on every process; ``solve_sharded`` over the 4 devices equals ``jax.vmap(fddp)``; a
    checkpointed rollout equals the uninterrupted one and resumes from the segments saved."""
    r = _launch("main", str(tmp_path))
    for out in r:
        assert "ALL OK" in out.stdout, out.stdout + out.stderr[-3000:]


@pytest.mark.slow  # a third pair of JAX processes; test_two_processes_equal_one launches the pair
def test_value_check_ends_every_process():
    """A value check failing on process 1's devices ends both processes with its message
    (process 0 was waiting for process 1 in a collective) well within the timeout."""
    import time

    from jaxdyn.distributed._launch import LaunchError

    t = time.monotonic()
    with pytest.raises(LaunchError) as e:
        _launch("value_check")
    assert time.monotonic() - t < TIMEOUT - 10, "ended by the timeout, not by the failure"
    msg = str(e.value)
    assert "process 1 of 2 failed" in msg, msg
    assert "rollout: the state has a non-finite entry" in msg, msg
    assert all(r.returncode != 0 for r in e.value.results)
    assert not any("no error" in r.stdout for r in e.value.results)


@pytest.mark.slow
def test_solve_sharded_across_processes():
    """``distributed.solve_sharded``: 5 double-pendulum FDDP problems over the 4 devices of 2
    processes (padded to 8) give ``jax.vmap(fddp)``'s statuses, iterations, costs and
    controls; problems that differ between the processes raise on both."""
    for out in _launch("trajopt"):
        assert "ALL OK" in out.stdout, out.stdout + out.stderr[-3000:]


@pytest.mark.slow
def test_ppo_across_processes():
    """Brax's PPO through ``distributed.train_ppo`` on 2 processes x 2 devices: it trains
    (finite parameters) and both processes end with the same parameters (the gradients averaged
    over the 4 devices); a ``num_envs`` not divisible by the devices raises on both."""
    for out in _launch("ppo"):
        assert "ALL OK" in out.stdout, out.stdout + out.stderr[-3000:]


SLEEPER = """
import os, sys, time
if os.environ["JAXDYN_PROCESS_ID"] == "1":
    sys.exit("process 1: a value check failed (" + os.environ["JAXDYN_COORDINATOR"] + ")")
time.sleep(120)
"""


def test_launcher_ends_the_others(tmp_path, capsys):
    """The launcher (no JAX): when process 1 fails, process 0 (which would wait 120 s) is ended
    at once and the failure's message is reported; the command line exits with its status."""
    import time

    from jaxdyn.distributed import LaunchError, launch
    from jaxdyn.distributed.__main__ import _cli

    script = tmp_path / "sleeper.py"
    script.write_text(SLEEPER)
    t = time.monotonic()
    with pytest.raises(LaunchError, match="process 1 of 2 failed") as e:
        launch([script], 2, timeout=100)
    assert time.monotonic() - t < 30
    assert "process 1: a value check failed (127.0.0.1:" in str(e.value)
    assert e.value.results[0].returncode != 0 and e.value.results[1].returncode == 1
    assert _cli(["-n", "2", str(script)]) == 1
    assert "process 1 of 2 failed" in capsys.readouterr().err
    # every process finishing: their outputs in process order; a run past the timeout is ended
    script.write_text("import os; print('hello from', os.environ['JAXDYN_PROCESS_ID'])")
    assert [r.stdout for r in launch([script], 3)] == [f"hello from {i}\n" for i in range(3)]
    script.write_text("import time; time.sleep(60)")
    with pytest.raises(LaunchError, match="did not finish within 1"):
        launch([script], 2, timeout=1)


def test_one_process_compiles_once():
    """Without ``jax.distributed`` (one process), ``distributed.rollout`` is the one-device
    rollout, and calling it again with the same model and configuration runs the program it
    compiled (a new ``sharded_vmap`` per call compiled the rollout every time: 28 s a call in
    the benchmark instead of a fraction of a second)."""
    import jax

    from jaxdyn import distributed as dist
    from jaxdyn import sim
    from jaxdyn.distributed import _apps

    model, cfg, jnp = _box_setup()
    q, v = _box_batch(2)
    q, v = q.astype(np.float32), v.astype(np.float32)
    U = np.zeros((2, 3, 0), np.float32)
    mesh = dist.global_mesh(jax.devices()[:1])
    outs = [dist.rollout(model, sim.State(q, v), U, cfg=cfg, mesh=mesh) for _ in range(2)]
    fn = _apps._rollout_fn(model, cfg, None, 3, mesh)
    assert fn._cache_size() == 1
    ref = jax.jit(jax.vmap(lambda s, u: sim.rollout(model, s, u, cfg=cfg)))(
        sim.State(jnp.asarray(q), jnp.asarray(v), jnp.zeros(2, jnp.float32)), jnp.asarray(U)
    )
    for out in outs:
        np.testing.assert_allclose(dist.gather(out.q), np.asarray(ref.q), rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match="rollout: give exactly one of controls"):
        dist.rollout(model, sim.State(q, v), cfg=cfg, mesh=mesh)
