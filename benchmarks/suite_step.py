"""CPU time of one environment step of jaxdyn's DM Control Suite ports against MuJoCo
Playground's MJX environments and ``mjx.step`` on the same MJCF file (issue 48, "steps/s >=
MJX's"), in one process.

Usage: ``python benchmarks/suite_step.py [--envs walker,hopper,cheetah,cartpole]
[--batches 32,256] [--dtypes float32] [--rounds 5] [--calls 4]
[--mjx-iterations file,playground,env]
[--jaxdyn-options "max_contacts=8;warm_start=true,solver_tolerance=1e-4;..."]
[--reference-iterations 400] [--fidelity-steps 20] [--time-limit 12]
[--out benchmarks/RESULTS.md] [--profile]``

For each environment (``ENVS``: jaxdyn's :class:`~jaxdyn.envs.dm_control_suite.WalkerMove`
``walker_walk``, :class:`~jaxdyn.envs.dm_control_suite.HopperTask` ``hopper_hop``,
:class:`~jaxdyn.envs.dm_control_suite.CheetahRun` and
:class:`~jaxdyn.envs.dm_control_suite.CartpoleBalance`) and batch size ``B``:

* jaxdyn: ``jax.jit(jax.vmap(env.step))`` (one control step: ``env.n_frames`` simulator
  steps, Playground's ``n_substeps`` of the same ``sim_dt``, observation and reward), from
  ``jax.vmap(env.reset)`` states under fixed random actions in ``[-1, 1]``; ``jaxdyn, k=v``
  (``--jaxdyn-options``, none by default) the same task with
  :class:`~jaxdyn.envs.dm_control_suite.ContactSuiteEnv`'s keywords (``solver_iterations``,
  ``max_contacts``, ``warm_start`` / ``solver_tolerance``; a warm-started variant starts from
  the same resets with zero impulses, :func:`warm`);
* ``Playground's env (MJX)`` (``env``; when ``mujoco_playground`` is importable):
  ``jax.jit(jax.vmap(env.step))`` of Playground's own environment (``registry.load(task,
  impl="jax")``: its copy of the file, its solver and contact caps, its observation and
  reward), from the same states (its resets with jaxdyn's ``qpos`` / ``qvel``);
* ``MJX (Playground's solver)`` (``playground``): ``jax.jit(jax.vmap(f))``, ``f``
  ``env.n_frames`` calls of ``mjx.step`` in a ``lax.scan`` (physics alone) on the MJCF file
  the environment loads (for the walker, hopper and cheetah dm_control's own ``suite/*.xml``,
  byte for byte; the cart-pole's is Playground's, Euler) with the ``iterations`` /
  ``ls_iterations`` (:data:`PLAYGROUND_ITERATIONS`) and the contact caps
  ``max_contact_points`` / ``max_geom_pairs`` (:data:`PLAYGROUND_CONTACTS`) of Playground's
  copy;
* ``MJX`` (``file``): the same on the file's own solver options (Newton, 100 iterations,
  tolerance 1e-8, no caps): the converged reference of the solver error, built and timed at
  the first batch size only.

Solver error (at the first batch size, ``--fidelity-steps`` control steps from the same
start; 0 disables it): what an engine's solve leaves unconverged, the largest ``|qpos -
qpos_ref|`` over the batch and the steps, ``qpos_ref`` the same engine with its solve
converged: jaxdyn's task with ``solver_iterations=--reference-iterations`` over every
contact slot (no cap), MJX on the file's solver options (the ``MJX`` row is that reference).
Each simulator against its own converged self, since the two contact models differ (hard
against soft): it measures what cutting the solver (and capping the contacts) costs each,
not how far apart they are. The next column is the same error over the batch's resets
without a penetrating contact (:func:`free_resets`).

Each dtype is a phase of its own (``jax_enable_x64`` off for float32, on for float64: jaxdyn's
environments take the dtype of ``jax_enable_x64`` when built, and so does MJX's
``put_model``). In a phase every function is compiled first (compile s: wall-clock of ``lower`` +
``compile``, jaxdyn's persistent compilation cache off), then timed interleaved: ``--rounds``
rounds, each running every engine's function ``--calls`` times in turn (its output state fed back),
the CPU time (``time.process_time``) of each engine's calls summed over the rounds and divided by
the env steps taken (``rounds * calls * B``): microseconds of CPU per env step. CPU time rather than
wall-clock, and the engines interleaved, so that a loaded machine's idle time and drift fall on both
alike. Single-threaded and pinned to one core (``_env.single_threaded``).

Prints a markdown table and writes the section ``SECTION`` of ``--out`` (the results file,
``benchmarks/RESULTS.md`` by default; ``--out ''`` writes nothing) through the shared writer
(:func:`_env.write_section`): the machine, the versions, the commit, the date, the load
average, and one table per dtype. Runtime: the defaults (four tasks, float32 as Playground,
B = 32 and 256, no jaxdyn options) compile 4 functions per contact task at B = 32 (jaxdyn,
its converged reference, MJX's two solvers, Playground's env) and 2-3 at B = 256, 10-40 s
each on an idle machine: about 10 minutes on an idle 2-core VM. ``--time-limit`` minutes (12
by default) bounds it: no (env, dtype) phase starts after it (so a run ends at most one
phase, a few minutes, past it), and the section names the phases left out. For the rest:
``--dtypes float32,float64``, ``--batches 32,64,128,256``, ``--jaxdyn-options`` (the earlier
default, :data:`DEFAULT_OPTIONS`), ``--profile`` (where jaxdyn's step spends its time),
``--settle N`` (:func:`settle`: every engine starts from jaxdyn's states after ``N`` control
steps under random actions instead of its resets).

The timed steps are the first after the start (one warm-up call, then ``--rounds`` x
``--calls``: 21 control steps, 0.5 s of the walker's time, by default), in which the walkers,
hoppers and cheetahs of the resets mostly fall through the air. A training loop steps them
on the floor, where the soft contact's Newton solve takes more steps (under ``vmap`` the
batch's slowest sets the count; the walker: 3.9 in steps 0-20, 4.9 from step 100 on) and MJX's
cut solve the same two: ``--settle 100`` times that regime. And each step is one jitted call,
whose dispatch costs Playground's step (its state: MJX's whole ``Data``, about a hundred
arrays in and out) far more than jaxdyn's; inside a training loop's ``lax.scan`` that cost is
gone, and the two steps are near equal (``docs/environments.md``, "Side by side with MuJoCo
Playground").
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this checkout's jaxdyn

import argparse  # noqa: E402
import os  # noqa: E402
import shlex  # noqa: E402
import time  # noqa: E402
from typing import Any  # noqa: E402

# compile s are compiles: jaxdyn's persistent compilation cache (on by default) off, so that a
# second run of this script does not read its programs back (set before jaxdyn is imported)
os.environ.setdefault("JAXDYN_COMPILATION_CACHE", "0")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import _env  # noqa: E402

#: name -> (jaxdyn task class name, constructor keyword arguments)
ENVS = {
    "walker": ("WalkerMove", {"move_speed": 1.0}),
    "hopper": ("HopperTask", {"hopping": True}),
    "cheetah": ("CheetahRun", {}),
    "cartpole": ("CartpoleBalance", {}),
}

#: the default ``--jaxdyn-options``: the contact cap alone, and with the warm start and an
#: early stop at two tolerances (docs/environments.md: the settings that beat MJX's cut
#: solver, in float32 and float64)
DEFAULT_OPTIONS = (
    "max_contacts=8;"
    "warm_start=true,solver_tolerance=1e-4,max_contacts=8;"
    "warm_start=true,solver_tolerance=1e-6,max_contacts=8"
)

#: Playground's ``<option iterations ls_iterations>`` for its copy of each file
#: (``mujoco_playground/_src/dm_control_suite/xmls``)
PLAYGROUND_ITERATIONS = {
    "walker": (2, 5),
    "hopper": (4, 10),
    "cheetah": (4, 8),
    "cartpole": (1, 4),
}


#: Playground's ``<custom>`` numerics ``max_contact_points`` / ``max_geom_pairs`` for its copy of
#: each file (MJX keeps that many contacts / runs the narrow phase on that many closest pairs
#: of each kind; ``None``: contact disabled)
PLAYGROUND_CONTACTS = {
    "walker": (4, 4),
    "hopper": (6, 2),
    "cheetah": (6, 4),
    "cartpole": None,
}

#: Playground's registered name of each task (its ``registry``)
PLAYGROUND_TASKS = {
    "walker": "WalkerWalk",
    "hopper": "HopperHop",
    "cheetah": "CheetahRun",
    "cartpole": "CartpoleBalance",
}


def build(name, options=""):
    """jaxdyn's environment ``name`` with ``options`` (``"k=v,k=v"``: the contact tasks'
    ``solver_iterations`` / ``max_contacts`` / ``solver_tolerance`` / ``warm_start``)."""
    from jaxdyn.envs import dm_control_suite as suite

    cls, kw = ENVS[name]
    extra = dict(kv.split("=") for kv in options.split(",") if kv)
    return getattr(suite, cls)(**kw, **{k: _value(v) for k, v in extra.items()})


def _value(text):
    """An option's value: ``true`` / ``false``, an integer, a float, else the text itself
    (``contact=hard``)."""
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def has_contact(name):
    from jaxdyn.envs import dm_control_suite as suite

    return issubclass(getattr(suite, ENVS[name][0]), suite.ContactSuiteEnv)


def start(env, B, seed=0):
    """``B`` reset states of ``env`` and fixed random actions in ``[-1, 1]``."""
    keys = jax.random.split(jax.random.PRNGKey(seed), B)
    states = jax.jit(jax.vmap(env.reset))(keys)
    dtype = states.pipeline_state.q.dtype
    act = jax.random.uniform(jax.random.PRNGKey(seed + 1), (B, env.action_size), dtype, -1, 1)
    return states, act


def settle(env, states, steps, seed=0):
    """``states`` after ``steps`` control steps of ``env`` under random actions in ``[-1,
    1]``, drawn anew each step (``--settle``: the bodies on the floor, as a training loop
    steps them, rather than falling from their resets)."""
    if steps <= 0:
        return states
    step = jax.jit(jax.vmap(env.step))
    B = states.obs.shape[0]
    dtype = states.pipeline_state.q.dtype
    key = jax.random.PRNGKey(seed + 2)
    for k in range(steps):
        a = jax.random.uniform(jax.random.fold_in(key, k), (B, env.action_size), dtype, -1, 1)
        states = step(states, a)
    return states


def warm(env, states):
    """``states`` (another variant's resets) with the zero impulses that ``env``'s
    warm-started solve carries (:func:`jaxdyn.sim.warm_state`; unchanged without one)."""
    from jaxdyn import sim

    model, cfg = env.sys.model, env.sys.cfg
    ps = jax.vmap(lambda p: sim.warm_state(model, sim.State(p.q, p.v, p.t, p.act), cfg))(
        states.pipeline_state
    )
    return states.replace(pipeline_state=ps)


def mjx_fn(env, states, act, iterations=None, caps=None):
    """``jit(vmap(f))``, ``f`` one control step of MJX (``env.n_frames`` ``mjx.step``) on the
    file ``env`` loads (``iterations``: ``(iterations, ls_iterations)`` instead of the file's;
    ``caps``: ``(max_contact_points, max_geom_pairs)``, the ``<custom>`` numerics of
    Playground's copy, added to it), and the MJX states of jaxdyn's ``states``."""
    import mujoco as _mujoco
    from mujoco import mjx

    from jaxdyn.envs.dm_control_suite import XML_DIR

    mujoco: Any = _mujoco  # MuJoCo ships no type stubs

    spec = mujoco.MjSpec.from_file(os.path.join(XML_DIR, env.xml))
    if caps is not None:
        for key, value in zip(("max_contact_points", "max_geom_pairs"), caps):
            spec.add_numeric(name=key, data=[float(value)])
    m = spec.compile()
    if iterations is not None:
        m.opt.iterations, m.opt.ls_iterations = iterations
    mx = mjx.put_model(m)
    d0 = mjx.put_data(m, mujoco.MjData(m))
    ps = states.pipeline_state
    qpos = jax.vmap(env.qpos)(ps.q)
    qvel = jax.vmap(env.qvel)(ps.q, ps.v)
    dtype = d0.qpos.dtype
    dx = jax.vmap(lambda p, v: d0.replace(qpos=p, qvel=v))(qpos.astype(dtype), qvel.astype(dtype))
    n = env.n_frames

    def frame(d, _):  # in the input's dtypes (with jax_enable_x64, mjx.step returns some
        # integer fields of put_data's int32 as int64)
        out = mjx.step(mx, d)
        return jax.tree_util.tree_map(lambda a, b: a.astype(b.dtype), out, d), None

    def one(d, u):
        return jax.lax.scan(frame, d.replace(ctrl=u), None, length=n)[0]

    return jax.jit(jax.vmap(one)), (dx, act.astype(dtype))


def playground_fn(name, env, states, act):
    """``jit(vmap(env.step))`` of Playground's own environment of the task (``impl="jax"``:
    MJX, its file, solver and contact caps, its observation and reward) and its states: its
    resets from the same keys with ``qpos`` / ``qvel`` set to jaxdyn's ``states``' (the same
    start; :func:`start`); ``None`` where ``mujoco_playground`` is not importable."""
    try:
        from mujoco_playground import registry  # pyright: ignore[reportMissingImports]
    except ImportError:
        return None
    pg = registry.load(PLAYGROUND_TASKS[name], config_overrides={"impl": "jax"})
    B = act.shape[0]
    ps = states.pipeline_state
    pst = jax.jit(jax.vmap(pg.reset))(jax.random.split(jax.random.PRNGKey(0), B))
    dtype = pst.data.qpos.dtype
    qpos = jax.vmap(env.qpos)(ps.q).astype(dtype)
    qvel = jax.vmap(env.qvel)(ps.q, ps.v).astype(dtype)
    pst = pst.replace(data=pst.data.replace(qpos=qpos, qvel=qvel))
    return jax.jit(jax.vmap(pg.step)), (pst, act.astype(dtype))


class Engine:
    """One timed function: ``fn(state, act) -> state``, its compile seconds, its ``qpos``
    reader (for the solver error) and its CPU seconds so far."""

    def __init__(self, label, fn, state, act, qpos, ref=None):
        t = time.perf_counter()
        self.fn = fn.lower(state, act).compile()
        self.compile_s = time.perf_counter() - t
        self.label, self.state, self.act, self.qpos, self.ref = label, state, act, qpos, ref
        self.cpu = 0.0
        self.error = self.error_free = None

    def rollout(self, steps):
        s, out = self.state, []
        for _ in range(steps):
            s = self.fn(s, self.act)
            out.append(np.asarray(self.qpos(s)))
        return np.stack(out)


def solver_errors(engines, steps, free=None):
    """Each engine's solver error: the largest ``|qpos - qpos_ref|`` over the batch and
    ``steps`` control steps from the same start, ``qpos_ref`` the rollout of its ``ref`` (the
    same engine with its solve converged); ``0`` for a reference itself. ``free (B,)``: the
    resets without a penetrating contact; ``error_free`` is the error over those alone."""
    cache = {}
    for e in engines:
        if e.ref is None:
            continue
        key = id(e.ref)
        if key not in cache:
            cache[key] = e.ref.rollout(steps)
        diff = np.abs(e.rollout(steps) - cache[key]).max(axis=(0, 2))  # per batch member
        e.error = float(np.max(diff))
        if free is not None:
            e.error_free = float(np.max(diff[free], initial=0.0))


def free_resets(env, states):
    """``(B,)`` bools: the reset states none of whose contact slots penetrates (distance
    ``>= 0``). Playground's resets of the hopper and the walker draw joint angles without
    a collision check, so a few start with one body inside another: there jaxdyn's hard
    contact problem has no solution (the penetration's recovery velocity on contacts whose
    normals the joints between the two bodies cannot all satisfy), its impulses grow without
    bound with the iterations and no iteration count is converged."""
    d = jax.vmap(env.contact_frames)(states.pipeline_state).distance
    return np.asarray(jnp.all(d >= 0, axis=-1))


def run_phase(
    dtype,
    names,
    batches,
    rounds,
    calls,
    mjx_kinds,
    jaxdyn_options,
    ref_its,
    steps,
    deadline=float("inf"),
    notes=None,
    settle_steps=0,
):
    """The rows of one dtype. ``deadline`` (``time.perf_counter``): no env starts after it
    (``notes["skipped"]`` names it); ``notes["penetrating"][(name, dtype)]``: the resets of the
    solver-error batch with a penetrating contact, and the batch size."""
    jax.config.update("jax_enable_x64", dtype == "float64")
    notes = {} if notes is None else notes
    rows = []
    for name in names:
        if time.perf_counter() > deadline:
            notes.setdefault("skipped", []).append(f"{name} ({dtype})")
            continue
        variants = [""] + (jaxdyn_options if has_contact(name) else [])
        envs = {k: build(name, k) for k in variants}
        for B in batches:
            env = envs[""]
            states, act = start(env, B)
            states = settle(env, states, settle_steps)

            def jd_qpos(s, env=env):
                return jax.vmap(env.qpos)(s.pipeline_state.q)

            fidelity = steps > 0 and B == batches[0]
            jd_ref = mjx_ref = None
            if fidelity and has_contact(name):  # converged: cold, every slot, every iteration
                e = build(name, REFERENCE.format(its=ref_its))
                st = warm(e, states)  # (no impulses: a cold solve)
                jd_ref = Engine("ref", jax.jit(jax.vmap(e.step)), st, act, jd_qpos)
            engines = []
            for k in variants:
                label = "jaxdyn" if not k else f"jaxdyn, {k.replace(',', ', ')}"
                f = jax.jit(jax.vmap(envs[k].step))
                st = warm(envs[k], states)
                engines.append(Engine(label, f, st, act, jd_qpos, jd_ref))
            # "file" first: the reference of the others; it runs where the solver error is
            # measured (the first batch size) only
            for kind in [k for k in MJX_KINDS if k in mjx_kinds]:
                if kind == "file" and not fidelity:
                    continue
                if fidelity and kind != "file" and mjx_ref is None:
                    g, (dx0, a0) = mjx_fn(env, states, act, None)
                    mjx_ref = Engine("ref", g, dx0, a0, lambda d: d.qpos)
                if kind == "env":
                    made = playground_fn(name, env, states, act)
                    if made is None:
                        notes.setdefault("no playground", True)
                        continue
                    f, (dx, a) = made
                    engines.append(Engine(ENV_LABEL, f, dx, a, lambda st: st.data.qpos, mjx_ref))
                    continue
                it = caps = None
                if kind == "playground":
                    it, caps = PLAYGROUND_ITERATIONS[name], PLAYGROUND_CONTACTS[name]
                label = "MJX" if kind == "file" else "MJX (Playground's solver)"
                f, (dx, a) = mjx_fn(env, states, act, it, caps)
                engines.append(Engine(label, f, dx, a, lambda d: d.qpos, mjx_ref))
                if kind == "file":
                    mjx_ref = engines[-1]
            if fidelity:
                free = free_resets(env, states) if has_contact(name) else None
                if free is not None:
                    pen = notes.setdefault("penetrating", {})
                    pen[(name, dtype)] = (int(np.sum(~free)), B)
                solver_errors(engines, steps, free)
            for e in engines:  # warm up: one call each
                e.state = jax.block_until_ready(e.fn(e.state, e.act))
            for _ in range(rounds):
                for e in engines:
                    t = time.process_time()
                    s = e.state
                    for _ in range(calls):
                        s = e.fn(s, e.act)
                    jax.block_until_ready(s)
                    e.cpu += time.process_time() - t
                    e.state = s
            n = rounds * calls * B
            base = engines[0].cpu / n
            for e in engines:
                us = 1e6 * e.cpu / n
                row = (name, dtype, B, e.label, us, 1e6 * base / us, e.compile_s, e.error)
                rows.append((*row, e.error_free))
                print(
                    f"{name:9s} {dtype} B={B:4d} {e.label:32s} {us:9.1f} us/step  "
                    f"compile {e.compile_s:6.1f} s  solver error {e.error} "
                    f"(resets without penetration: {e.error_free})",
                    flush=True,
                )
    return rows


def profile(name, dtype, B, rounds, calls):
    """Per-phase CPU time of one env step of jaxdyn's task ``name`` (``--profile``): the whole
    step at the default 100 solver iterations and at 1 (their difference: the solve's iterations,
    per iteration), at 1 with the step-size bound's matrix product left out
    (:func:`jaxdyn.sim.contact.lambda_max_bound` replaced by its row-sum term: what the
    ``A @ A`` costs; a different step size, for the timing only), the contact kinematics and
    collision alone (:meth:`~jaxdyn.envs.dm_control_suite.ContactSuiteEnv.contact_frames`, once
    per simulator step in the step) and the task's sensors (once per env step); with the
    number of XLA fusions and of ``while`` loops in each compiled program."""
    from jaxdyn.sim import contact as C

    jax.config.update("jax_enable_x64", dtype == "float64")
    bound = C.lambda_max_bound
    parts = []
    env = build(name)
    states, act = start(env, B)
    one = "solver_iterations=1"
    for label, k, patch in (
        ("step, 100 iterations", "", None),
        ("step, 1 iteration", one, None),
        ("step, 1 iteration, no A @ A bound", one, lambda A: jnp.max(jnp.sum(jnp.abs(A), -1))),
    ):
        e = build(name, k)
        if patch is not None:
            C.lambda_max_bound = patch
        try:
            c = jax.jit(jax.vmap(e.step)).lower(states, act).compile()
        finally:
            C.lambda_max_bound = bound
        parts.append([label, c, (states, act), True])
    ps = states.pipeline_state
    frames = jax.jit(jax.vmap(lambda p: env.contact_frames(p).distance)).lower(ps).compile()
    sensors = jax.jit(jax.vmap(env.state_sensors)).lower(ps).compile()
    parts.append(["contact kinematics + collision (one simulator step)", frames, (ps,), False])
    parts.append(["sensors (observation, reward inputs)", sensors, (ps,), False])
    cpu = [0.0] * len(parts)
    for _ in range(rounds):
        for i, (_, c, args, carry) in enumerate(parts):
            t = time.process_time()
            out = None
            for _ in range(calls):
                out = c(*args)
                if carry:
                    args = (out, args[1])
            jax.block_until_ready(out)
            cpu[i] += time.process_time() - t
            parts[i][2] = args
    print(f"\n{name}, {dtype}, B = {B}, {env.n_frames} simulator steps per env step:\n")
    print("| part | CPU us / env | XLA fusions | while loops |")
    print("| --- | --- | --- | --- |")
    for (label, c, _, _), t in zip(parts, cpu):
        text = c.as_text()
        fusions, loops = text.count(" fusion("), text.count(" while(")
        print(f"| {label} | {1e6 * t / (rounds * calls * B):.1f} | {fusions} | {loops} |")


def table(rows, steps):
    out = [
        "| env | dtype | B | engine | CPU us / env step | jaxdyn's cost / this | compile s "
        f"| solver error ({steps} steps) | its resets without penetration |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, dtype, B, eng, us, ratio, ct, err, free in rows:
        r = "" if eng == "jaxdyn" else f"{ratio:.2f}"
        e = "" if err is None else f"{err:.1e}"
        f = "" if free is None else f"{free:.1e}"
        out.append(f"| {name} | {dtype} | {B} | {eng} | {us:.1f} | {r} | {ct:.1f} | {e} | {f} |")
    return "\n".join(out)


#: the MJX engines (``--mjx-iterations``), in the order they are built: ``file``, MJX on the
#: file's solver (the converged reference; at the first batch size only); ``playground``,
#: ``mjx.step`` with Playground's solver iterations and contact caps (physics alone);
#: ``env``, Playground's own environment step (physics, observation and reward)
MJX_KINDS = ("file", "playground", "env")
#: the label of Playground's own environment (``env``)
ENV_LABEL = "Playground's env (MJX)"
#: the options of jaxdyn's converged reference: ``its`` cold iterations (no warm start;
#: a tolerance of 0 stops only at an exact fixed point) over every slot (a cap above the
#: tasks' slot counts)
REFERENCE = "solver_iterations={its},max_contacts=1000,warm_start=false,solver_tolerance=0"

#: the results file's section of this script
SECTION = "## DM Control Suite: one env step against MJX (CPU)"


def engine_label(label):
    """The section's name of an engine row: jaxdyn's default, one of its options (the contact
    tasks' keywords, labelled as such), or MJX with the file's or Playground's solver."""
    if label == "jaxdyn":
        return "jaxdyn (default)"
    if label.startswith("jaxdyn, "):
        return f"jaxdyn, option `{label[len('jaxdyn, ') :]}`"
    if label == "MJX":
        return "MJX (the file's solver)"
    return label


def section(rows, args, load0, load1, notes, command):
    """The results file's section (``SECTION``): machine, versions, commit, date, load, and one
    table per dtype; each row's speed against Playground's env (MJX with Playground's solver
    where it did not run) at the same env and batch (``Playground / this``: above 1,
    cheaper)."""
    import datetime

    shared = max(load0, load1) > 1.5
    lines = [
        SECTION,
        "",
        f"`{command}` on {_env.cpu_name()}, {os.cpu_count()} cores ({_env.threading_note()}); "
        f"jax {jax.__version__}, mujoco / MJX {_env.dist_version('mujoco')} / "
        f"{_env.dist_version('mujoco-mjx')}, jaxdyn {_env.git_commit()}; "
        f"{datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}; "
        f"load average {load0:.1f} at the start, {load1:.1f} at the end"
        + (
            " (the machine was shared with other work: the ratios hold better than the "
            "absolute figures)"
            if shared
            else ""
        )  # fmt: skip
        + ".",
        "",
        "One control step (`env.n_frames` simulator steps, the same time step and frame "
        "count as Playground's) of jaxdyn's DM Control Suite ports, "
        "`jax.jit(jax.vmap(env.step))` with observation and reward, against Playground's own "
        "environment step (*Playground's env (MJX)*: `registry.load(task, impl='jax')`, its "
        "file, solver and contact caps, observation and reward) and against as many `mjx.step` "
        "on the same MJCF file (physics only): *MJX* with the file's solver (Newton, 100 "
        "iterations: the converged reference, at the first batch size only), *MJX "
        "(Playground's solver)* with the `iterations` / `ls_iterations` and the "
        "`max_contact_points` / `max_geom_pairs` of Playground's copy; from the same states "
        + (
            f"(jaxdyn's resets after {args.settle} control steps under random actions, "
            "`--settle`: the bodies on the floor) "
            if getattr(args, "settle", 0)
            else "(jaxdyn's resets: the first steps, in which the bodies mostly fall; "
            "`--settle 100` starts them on the floor, as in training) "
        )
        + "under the same fixed random actions. CPU microseconds per env step "
        "(`time.process_time`, engines interleaved in one process, one core: "
        f"{args.rounds} rounds x {args.calls} calls). jaxdyn's rows: its default task (the "
        "cheetah, walker and hopper solve over their 6 closest contact slots), then any "
        "options given (`ContactSuiteEnv`'s keywords). *Playground / this*: the cost of "
        "Playground's env (MJX with Playground's solver where the env did not run) over the "
        "row's (above 1: cheaper). *Compile s*: wall-clock of `lower` + `compile` of the "
        "row's step, jaxdyn's persistent compilation cache off (`JAXDYN_COMPILATION_CACHE=0`, "
        f"unless the caller set it). *Solver error*: the largest `qpos` difference over "
        f"{args.fidelity_steps} control steps from the engine with its solve converged "
        f"(jaxdyn: `solver_iterations={args.reference_iterations}`, cold, over every contact "
        "slot; "
        "MJX: the file's Newton solve without caps), "
        "each engine against itself (the contact models differ: hard against soft).",
    ]
    pen = notes.get("penetrating", {})
    if pen:
        lines += [
            "",
            "Resets with a penetrating contact in the solver-error batch (jaxdyn's walker and "
            "hopper reject them, Playground's keep them; the cheetah's settle first): "
            + ", ".join(f"{n} {d} {k} of {b}" for (n, d), (k, b) in pen.items())
            + ".",
        ]
    # the comparison of each row: Playground's own env where it ran, else MJX's cut solver
    mjx_cut = {(r[0], r[1], r[2]): r[4] for r in rows if r[3] == "MJX (Playground's solver)"}
    mjx_cut |= {(r[0], r[1], r[2]): r[4] for r in rows if r[3] == ENV_LABEL}
    for dtype in dict.fromkeys(r[1] for r in rows):
        lines += [
            "",
            f"{dtype}:",
            "",
            "| env | B | engine | CPU us / env step | Playground / this | compile s "
            "| solver error |",
            "| --- | --- | --- | --- | --- | --- | --- |",
        ]
        for name, dt, B, eng, us, _, ct, err, _ in rows:
            if dt != dtype:
                continue
            cut = mjx_cut.get((name, dt, B))
            r = "" if cut is None else f"{cut / us:.2f}"
            e = "(reference)" if eng == "MJX" and err is None else (
                "" if err is None else f"{err:.1e}"
            )  # fmt: skip
            lines.append(
                f"| {name} | {B} | {engine_label(eng)} | {us:.0f} | {r} | {ct:.1f} | {e} |"
            )
    if notes.get("no playground"):
        lines += [
            "",
            "Playground's own environment did not run (`mujoco_playground` not importable): "
            "*Playground / this* is against MJX with Playground's solver and contact caps.",
        ]
    if notes.get("skipped"):
        lines += [
            "",
            f"Not run (past `--time-limit {args.time_limit:g}` minutes): "
            + ", ".join(notes["skipped"])
            + ".",
        ]
    return "\n".join(lines) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--envs", default="walker,hopper,cheetah,cartpole")
    p.add_argument("--batches", default="32,256")
    p.add_argument("--dtypes", default="float32")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--calls", type=int, default=4)
    p.add_argument(
        "--mjx-iterations",
        default="file,playground,env",
        help="MJX engines: file (the file's solver, the reference), playground (Playground's "
        "solver and contact caps), env (Playground's own environment, if importable)",
    )
    p.add_argument(
        "--jaxdyn-options",
        default="",
        help="extra jaxdyn rows of the contact tasks, ';' between rows ('' for none; "
        f"the earlier default: {DEFAULT_OPTIONS!r})",
    )
    p.add_argument(
        "--time-limit",
        type=float,
        default=12.0,
        help="minutes: no (env, dtype) phase starts after them (the section names those left)",
    )
    p.add_argument(
        "--out",
        default=str(Path(__file__).resolve().parent / "RESULTS.md"),
        help="the results file whose section this run writes ('' for none: print only)",
    )
    p.add_argument("--reference-iterations", type=int, default=400)
    p.add_argument("--fidelity-steps", type=int, default=20)
    p.add_argument(
        "--settle",
        type=int,
        default=0,
        help="control steps under random actions from the resets before the timed steps "
        "(0: from the resets; 100: the bodies on the floor, as in training)",
    )
    p.add_argument(
        "--profile",
        action="store_true",
        help="the per-phase breakdown of each env's step instead (first batch, dtype)",
    )
    a = p.parse_args(argv)
    _env.single_threaded()  # before JAX's backend starts (its first computation)
    names = [n for n in a.envs.split(",") if n]
    for n in names:
        if n not in ENVS:
            p.error(f"--envs: unknown env {n!r} (known: {', '.join(ENVS)})")
    batches = [int(b) for b in a.batches.split(",")]
    if a.profile:
        for n in names:
            profile(n, a.dtypes.split(",")[0], batches[0], a.rounds, a.calls)
        return None
    kinds = [k for k in a.mjx_iterations.split(",") if k]
    options = [k for k in a.jaxdyn_options.split(";") if k]
    load0 = os.getloadavg()[0]
    deadline = time.perf_counter() + 60 * a.time_limit
    rows, notes = [], {}
    for dtype in a.dtypes.split(","):
        rows += run_phase(
            dtype,
            names,
            batches,
            a.rounds,
            a.calls,
            kinds,
            options,
            a.reference_iterations,
            a.fidelity_steps,
            deadline,
            notes,
            a.settle,
        )
    print()
    print(table(rows, a.fidelity_steps))
    print()
    print(
        f"jax {jax.__version__}; {_env.cpu_name()}; {_env.threading_note()}; "
        f"CPU time per env step, engines interleaved ({a.rounds} rounds x {a.calls} calls)"
    )
    if a.out:
        given = list(argv if argv is not None else sys.argv[1:])
        for k in [i for i, x in enumerate(given) if x == "--out"][::-1]:  # not the file
            del given[k : k + 2]
        given = [x for x in given if not x.startswith("--out=")]
        command = shlex.join(["python", "benchmarks/suite_step.py", *given])
        text = section(rows, a, load0, os.getloadavg()[0], notes, command)
        _env.write_section(a.out, text)
        print(f"wrote {SECTION!r} into {a.out}")
    return np.asarray([r[4] for r in rows])


if __name__ == "__main__":
    main()
