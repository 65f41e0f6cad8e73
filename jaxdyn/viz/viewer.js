// jaxdyn.viz viewer: a small WebGL2 renderer of the triangle meshes and per-step placements
// that jaxdyn.viz.html embeds in the page (id "jaxdyn-data"). No third-party code.
"use strict";
(function () {
  const statusEl = document.getElementById("status");
  function fail(msg) {
    statusEl.textContent = "error: " + msg;
    statusEl.style.color = "#b00";
    statusEl.dataset.state = "error";
  }
  window.addEventListener("error", (e) => fail(e.message));

  const D = JSON.parse(document.getElementById("jaxdyn-data").textContent);
  function decode(b64, Type) {
    const s = atob(b64);
    const u = new Uint8Array(s.length);
    for (let i = 0; i < s.length; i++) u[i] = s.charCodeAt(i);
    return new Type(u.buffer);
  }

  const canvas = document.getElementById("view");
  const gl = canvas.getContext("webgl2", { antialias: true, preserveDrawingBuffer: true });
  if (!gl) {
    fail("WebGL2 is not available in this browser");
    return;
  }

  // ------------------------------------------------------------------ shaders
  const VS = `#version 300 es
  in vec3 pos; uniform mat4 model, vp; out vec3 wpos;
  void main() { vec4 w = model * vec4(pos, 1.0); wpos = w.xyz; gl_Position = vp * w; }`;
  const FS = `#version 300 es
  precision highp float;
  in vec3 wpos; uniform vec4 color; uniform vec3 eye; uniform int checker; uniform float cell;
  out vec4 frag;
  void main() {
    vec3 n = normalize(cross(dFdx(wpos), dFdy(wpos)));
    vec3 V = normalize(eye - wpos);
    if (dot(n, V) < 0.0) n = -n;
    vec3 L = normalize(vec3(0.35, 0.25, 1.0));
    vec3 base = color.rgb;
    if (checker == 1) {
      float c = mod(floor(wpos.x / cell) + floor(wpos.y / cell), 2.0);
      base = mix(vec3(0.80, 0.83, 0.86), vec3(0.68, 0.72, 0.76), c);
    }
    float shade = 0.35 + 0.45 * max(dot(n, L), 0.0) + 0.25 * abs(dot(n, V));
    frag = vec4(base * shade, color.a);
  }`;
  function compile(type, src) {
    const s = gl.createShader(type);
    gl.shaderSource(s, src);
    gl.compileShader(s);
    if (!gl.getShaderParameter(s, gl.COMPILE_STATUS)) throw new Error(gl.getShaderInfoLog(s));
    return s;
  }
  const prog = gl.createProgram();
  gl.attachShader(prog, compile(gl.VERTEX_SHADER, VS));
  gl.attachShader(prog, compile(gl.FRAGMENT_SHADER, FS));
  gl.linkProgram(prog);
  if (!gl.getProgramParameter(prog, gl.LINK_STATUS)) throw new Error(gl.getProgramInfoLog(prog));
  const U = {};
  for (const n of ["model", "vp", "color", "eye", "checker", "cell"])
    U[n] = gl.getUniformLocation(prog, n);
  const aPos = gl.getAttribLocation(prog, "pos");

  function mesh(positions, indices) {
    const vao = gl.createVertexArray();
    gl.bindVertexArray(vao);
    const vb = gl.createBuffer();
    gl.bindBuffer(gl.ARRAY_BUFFER, vb);
    gl.bufferData(gl.ARRAY_BUFFER, positions, gl.STATIC_DRAW);
    gl.enableVertexAttribArray(aPos);
    gl.vertexAttribPointer(aPos, 3, gl.FLOAT, false, 0, 0);
    const ib = gl.createBuffer();
    gl.bindBuffer(gl.ELEMENT_ARRAY_BUFFER, ib);
    gl.bufferData(gl.ELEMENT_ARRAY_BUFFER, indices, gl.STATIC_DRAW);
    gl.bindVertexArray(null);
    return { vao: vao, count: indices.length };
  }

  const parts = D.parts.map((p) => Object.assign(mesh(decode(p.positions, Float32Array),
    decode(p.indices, Uint32Array)), { body: p.body, color: p.color }));
  let poses = decode(D.poses, Float32Array);
  const NB = D.nbodies, T = D.steps, B = D.batch;

  // terrain
  let ground = null;
  const ext = D.extent;
  if (D.terrain && D.terrain.kind === "plane") {
    const n = D.terrain.normal, h = D.terrain.height, S = 60 * Math.max(ext, 1);
    let a = Math.abs(n[0]) < 0.9 ? [1, 0, 0] : [0, 1, 0];
    let u = cross(n, a); u = scale(u, 1 / norm(u));
    const v = cross(n, u);
    const c = scale(n, h);
    const P = [];
    for (const [s, t] of [[-1, -1], [1, -1], [1, 1], [-1, 1]])
      for (let k = 0; k < 3; k++) P.push(c[k] + S * (s * u[k] + t * v[k]));
    ground = mesh(new Float32Array(P), new Uint32Array([0, 1, 2, 0, 2, 3]));
  } else if (D.terrain && D.terrain.kind === "mesh") {
    ground = mesh(decode(D.terrain.positions, Float32Array), decode(D.terrain.indices, Uint32Array));
  }

  // contact markers: a ball where a contact touches, or an arrow of its force (jaxdyn.viz.html)
  let marks = null;
  if (D.marks) {
    const K = D.marks, um = (m) => mesh(decode(m.positions, Float32Array), decode(m.indices, Uint32Array));
    marks = { n: K.n, points: decode(K.points, Float32Array), show: decode(K.show, Uint8Array),
      vectors: K.vectors ? decode(K.vectors, Float32Array) : null, radius: K.radius, width: K.width,
      color: K.color, sphere: um(K.sphere), shaft: um(K.shaft), head: um(K.head) };
  }

  // ------------------------------------------------------------------ small linear algebra
  function cross(a, b) { return [a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]]; }
  function norm(a) { return Math.hypot(a[0], a[1], a[2]); }
  function scale(a, s) { return [a[0] * s, a[1] * s, a[2] * s]; }
  function sub(a, b) { return [a[0] - b[0], a[1] - b[1], a[2] - b[2]]; }
  function add(a, b) { return [a[0] + b[0], a[1] + b[1], a[2] + b[2]]; }
  function dot(a, b) { return a[0] * b[0] + a[1] * b[1] + a[2] * b[2]; }
  function mul(A, Bm) { // column-major 4x4
    const C = new Float32Array(16);
    for (let i = 0; i < 4; i++) for (let j = 0; j < 4; j++) {
      let s = 0;
      for (let k = 0; k < 4; k++) s += A[k * 4 + i] * Bm[j * 4 + k];
      C[j * 4 + i] = s;
    }
    return C;
  }
  function lookAt(eye, target, up) {
    const f = sub(target, eye); const fz = scale(f, 1 / norm(f));
    let s = cross(fz, up); s = scale(s, 1 / norm(s));
    const u = cross(s, fz);
    return new Float32Array([s[0], u[0], -fz[0], 0, s[1], u[1], -fz[1], 0, s[2], u[2], -fz[2], 0,
      -dot(s, eye), -dot(u, eye), dot(fz, eye), 1]);
  }
  function perspective(fovy, aspect, near, far) {
    const f = 1 / Math.tan(fovy / 2), nf = 1 / (near - far);
    return new Float32Array([f / aspect, 0, 0, 0, 0, f, 0, 0, 0, 0, (far + near) * nf, -1, 0, 0,
      2 * far * near * nf, 0]);
  }

  // ------------------------------------------------------------------ state and controls
  const cam = Object.assign({}, D.camera);
  let onStep = null; // the joint sliders follow the first robot along the trajectory
  let t = 0, playing = false, speed = 1, last = null, pan = [0, 0, 0];
  const timeEl = document.getElementById("time"), clockEl = document.getElementById("clock");
  const playEl = document.getElementById("play"), followEl = document.getElementById("follow");
  timeEl.max = String(T - 1);
  // a step in the address (#t=12) opens the page there
  const tm = /[#&]t=(\d+)/.exec(location.hash);
  if (tm) t = Math.min(T - 1, Number(tm[1]));
  followEl.checked = !!cam.follow;
  if (T <= 1) { playEl.disabled = true; timeEl.disabled = true; }
  timeEl.addEventListener("input", () => { t = Number(timeEl.value); playing = false; draw(); });
  playEl.addEventListener("click", () => { playing = !playing; last = null; if (playing) requestAnimationFrame(tick); draw(); });
  document.getElementById("speed").addEventListener("change", (e) => { speed = Number(e.target.value); });
  followEl.addEventListener("change", () => { cam.follow = followEl.checked; pan = [0, 0, 0]; draw(); });
  window.addEventListener("keydown", (e) => { if (e.code === "Space" && e.target === document.body) { e.preventDefault(); playEl.click(); } });
  let drag = null;
  canvas.addEventListener("contextmenu", (e) => e.preventDefault());
  canvas.addEventListener("pointerdown", (e) => { drag = { x: e.clientX, y: e.clientY, pan: e.button === 2 || e.shiftKey }; canvas.setPointerCapture(e.pointerId); });
  canvas.addEventListener("pointerup", () => { drag = null; });
  canvas.addEventListener("pointermove", (e) => {
    if (!drag) return;
    const dx = e.clientX - drag.x, dy = e.clientY - drag.y;
    drag.x = e.clientX; drag.y = e.clientY;
    if (drag.pan) {
      const az = cam.azimuth * Math.PI / 180, k = cam.distance * 0.002;
      pan = add(pan, [(-Math.sin(az) * -dx) * k, (Math.cos(az) * -dx) * k, dy * k]);
    } else {
      cam.azimuth -= dx * 0.4;
      cam.elevation = Math.max(-89, Math.min(89, cam.elevation - dy * 0.4));
    }
    draw();
  });
  canvas.addEventListener("wheel", (e) => { e.preventDefault(); cam.distance *= Math.exp(e.deltaY * 0.001); draw(); }, { passive: false });
  window.addEventListener("resize", draw);

  function tick(now) {
    if (!playing) return;
    if (last !== null) {
      t += (now - last) / 1000 / D.dt * speed;
      if (t >= T) t = 0;
    }
    last = now;
    draw();
    requestAnimationFrame(tick);
  }

  function pose(b, step, k) { return ((b * T + step) * NB + k) * 12; }
  function target(step) {
    if (cam.target) return add(cam.target, pan);
    if (cam.follow && D.base >= 0) {
      let c = [0, 0, 0];
      for (let b = 0; b < B; b++) {
        const o = pose(b, step, D.base);
        c = add(c, add([poses[o + 9], poses[o + 10], poses[o + 11]], D.offsets[b]));
      }
      return add(add(scale(c, 1 / B), sub(D.center, D.base0)), pan);
    }
    return add(D.center, pan);
  }

  function draw() {
    const w = canvas.clientWidth, h = canvas.clientHeight, dpr = window.devicePixelRatio || 1;
    if (canvas.width !== Math.round(w * dpr) || canvas.height !== Math.round(h * dpr)) {
      canvas.width = Math.round(w * dpr); canvas.height = Math.round(h * dpr);
    }
    const step = Math.max(0, Math.min(T - 1, Math.floor(t)));
    timeEl.value = String(step);
    if (onStep) onStep(step);
    clockEl.textContent = (step * D.dt).toFixed(3) + " s";
    playEl.innerHTML = playing ? "&#10074;&#10074;" : "&#9654;";
    const az = cam.azimuth * Math.PI / 180, el = cam.elevation * Math.PI / 180;
    const fwd = [Math.cos(el) * Math.cos(az), Math.cos(el) * Math.sin(az), Math.sin(el)];
    const tg = target(step);
    const eye = sub(tg, scale(fwd, cam.distance));
    const vp = mul(perspective(cam.fov * Math.PI / 180, canvas.width / Math.max(canvas.height, 1),
      0.01 * cam.distance, 200 * cam.distance), lookAt(eye, tg, [0, 0, 1]));
    gl.viewport(0, 0, canvas.width, canvas.height);
    gl.clearColor(0.86, 0.9, 0.95, 1);
    gl.clear(gl.COLOR_BUFFER_BIT | gl.DEPTH_BUFFER_BIT);
    gl.enable(gl.DEPTH_TEST);
    gl.useProgram(prog);
    gl.uniformMatrix4fv(U.vp, false, vp);
    gl.uniform3fv(U.eye, eye);
    gl.uniform1f(U.cell, Math.max(0.1, Math.pow(10, Math.round(Math.log10(ext))) / 2));
    const I = new Float32Array([1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1]);
    if (ground) {
      gl.uniform1i(U.checker, 1);
      gl.uniform4fv(U.color, [0.8, 0.8, 0.8, 1]);
      gl.uniformMatrix4fv(U.model, false, I);
      gl.bindVertexArray(ground.vao);
      gl.drawElements(gl.TRIANGLES, ground.count, gl.UNSIGNED_INT, 0);
    }
    gl.uniform1i(U.checker, 0);
    const M = new Float32Array(16);
    for (let b = 0; b < B; b++) {
      const off = D.offsets[b];
      for (const p of parts) {
        if (p.body < 0) {
          M.set(I); M[12] = off[0]; M[13] = off[1]; M[14] = off[2];
        } else {
          const o = pose(b, step, p.body);
          M[0] = poses[o]; M[1] = poses[o + 3]; M[2] = poses[o + 6]; M[3] = 0;
          M[4] = poses[o + 1]; M[5] = poses[o + 4]; M[6] = poses[o + 7]; M[7] = 0;
          M[8] = poses[o + 2]; M[9] = poses[o + 5]; M[10] = poses[o + 8]; M[11] = 0;
          M[12] = poses[o + 9] + off[0]; M[13] = poses[o + 10] + off[1];
          M[14] = poses[o + 11] + off[2]; M[15] = 1;
        }
        gl.uniformMatrix4fv(U.model, false, M);
        gl.uniform4fv(U.color, p.color);
        gl.bindVertexArray(p.vao);
        gl.drawElements(gl.TRIANGLES, p.count, gl.UNSIGNED_INT, 0);
      }
    }
    if (marks) drawMarks(step, M);
    gl.bindVertexArray(null);
  }

  // M (column-major) = [x y z] * diag(sx, sy, sz) placed at o, z along unit direction d
  function placeAlong(M, o, d, sxy, sz) {
    const a = Math.abs(d[0]) < 0.9 ? [1, 0, 0] : [0, 1, 0];
    let x = cross(d, a); x = scale(x, 1 / norm(x));
    const y = cross(d, x);
    M.set([x[0] * sxy, x[1] * sxy, x[2] * sxy, 0, y[0] * sxy, y[1] * sxy, y[2] * sxy, 0,
      d[0] * sz, d[1] * sz, d[2] * sz, 0, o[0], o[1], o[2], 1]);
  }
  function drawOne(m, M) {
    gl.uniformMatrix4fv(U.model, false, M);
    gl.bindVertexArray(m.vao);
    gl.drawElements(gl.TRIANGLES, m.count, gl.UNSIGNED_INT, 0);
  }
  function drawMarks(step, M) {
    const K = marks, r = K.radius, w = K.width;
    gl.uniform4fv(U.color, K.color);
    for (let b = 0; b < B; b++) {
      const off = D.offsets[b];
      for (let k = 0; k < K.n; k++) {
        const i = (b * T + step) * K.n + k;
        if (!K.show[i]) continue;
        const o = add([K.points[3 * i], K.points[3 * i + 1], K.points[3 * i + 2]], off);
        if (!K.vectors) {
          placeAlong(M, o, [0, 0, 1], r, r);
          drawOne(K.sphere, M);
          continue;
        }
        const v = [K.vectors[3 * i], K.vectors[3 * i + 1], K.vectors[3 * i + 2]];
        const L = norm(v), d = scale(v, 1 / L), hl = Math.min(0.4 * L, 6 * w);
        placeAlong(M, o, d, w, L - hl);
        drawOne(K.shaft, M);
        placeAlong(M, add(o, scale(d, L - hl)), d, 2 * w, hl);
        drawOne(K.head, M);
      }
    }
  }

  // ------------------------------------------------------------------ live joint sliders
  if (D.live) {
    const side = document.getElementById("side");
    side.style.display = "block";
    // the first robot's configuration at each step (the sliders' values; their edits kept)
    const Q = D.live.qs ? D.live.qs.map((r) => r.slice()) : [D.live.q.slice()];
    let shown = Math.max(0, Math.min(Q.length - 1, Math.floor(t)));
    let q = Q[shown];
    const inputs = [];
    let pending = false, again = false;
    async function update() {
      if (pending) { again = true; return; }
      pending = true;
      try {
        const r = await fetch(D.live.endpoint, { method: "POST", body: JSON.stringify({ q: q }),
          headers: { "Content-Type": "application/json" } });
        const j = await r.json();
        if (j.error) throw new Error(j.error);
        const one = decode(j.poses, Float32Array);
        poses.set(one, pose(0, shown, 0));
        draw();
      } catch (e) { fail(String(e.message || e)); }
      pending = false;
      if (again) { again = false; update(); }
    }
    // a pose in the address: #q=0.1,0.2,... (all nq values) sets the sliders
    const m = /[#&]q=([^&]*)/.exec(location.hash);
    if (m) {
      const v = m[1].split(",").map(Number);
      if (v.length !== q.length || v.some((x) => !Number.isFinite(x)))
        throw new Error("#q= needs " + q.length + " numbers");
      v.forEach((x, i) => { q[i] = x; });
      update();
    }
    for (const jt of D.live.joints) {
      const lab = document.createElement("label");
      const val = document.createElement("span");
      const inp = document.createElement("input");
      inp.type = "range"; inp.min = jt.lo; inp.max = jt.hi; inp.step = (jt.hi - jt.lo) / 500;
      inp.value = q[jt.index]; inp.dataset.joint = jt.name;
      val.textContent = " " + Number(q[jt.index]).toFixed(3);
      inp.addEventListener("input", () => {
        q[jt.index] = Number(inp.value); val.textContent = " " + q[jt.index].toFixed(3); update();
      });
      inputs.push([jt, inp, val]);
      lab.append(jt.name, val, inp);
      side.append(lab);
    }
    onStep = (step) => {
      if (step === shown || step >= Q.length || pending) return;
      shown = step; q = Q[step];
      for (const [jt, inp, val] of inputs) {
        inp.value = q[jt.index]; val.textContent = " " + Number(q[jt.index]).toFixed(3);
      }
    };
  }

  draw();
  if (statusEl.dataset.state !== "error") {
    statusEl.textContent = D.title + ": " + B + " x " + T + " steps";
    statusEl.dataset.state = "ready";
  }
})();
