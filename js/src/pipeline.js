// Pipeline strip of leakwidget: an anywidget ESM module.
//
// Draws the tf.data / user stages recorded by a watch as a left-to-right chain
// (source -> interleave -> shuffle -> map -> batch -> prefetch ...). Each toggleable stage
// clicks through on -> serial -> off (serial only for parallel stages) and writes the wish
// back into the synced `states` dict; the kernel applies it at the next "Run again". Which
// states a stage can take comes from Python (`stage.states`, leakwidget/stages: Stage.states),
// the one place those rules live.
// Stages blamed by a bisection (synced `culprits`) are drawn in red. Hovering shows the
// call site that built the stage.
//
// Synced traits (see leakwidget/notebook/strip.py, PipelineStrip):
//   stages:   [{id, kind, site, args, inputs, toggleable, parallel, state, states}, ...]
//   states:   {stage id: "on" | "serial" | "off"}   wishes from clicks, written by this view
//   culprits: [stage id, ...]
//   disabled: bool                                   e.g. while a bisection is running
//
// The pure functions are exported for `node --test js/tests/`.

export const STATES = ["on", "serial", "off"];

/** The states a click cycles through, in order (from Python; "on" alone: not clickable). */
export function allowedStates(stage) {
  return stage.states ?? ["on"];
}

/** The state a click moves a stage to: the next of its allowed states, round to the first. */
export function nextState(stage, current) {
  const state = current ?? stage.state ?? "on";
  const allowed = allowedStates(stage);
  if (allowed.length < 2) return state;
  return allowed[(allowed.indexOf(state) + 1) % allowed.length];
}

/** The state to draw: the user's wish when there is one, else what the watch recorded. */
export function effectiveState(stage, states) {
  const wish = states ? states[stage.id] : undefined;
  return STATES.includes(wish) ? wish : (stage.state ?? "on");
}

/** A new `states` dict after clicking `stage` (the old one is not modified). */
export function applyClick(states, stage) {
  const current = effectiveState(stage, states);
  const next = nextState(stage, current);
  return { ...(states ?? {}), [stage.id]: next };
}

/**
 * Left-to-right layout: a stage's column is one more than the deepest of its inputs, so a
 * linear pipeline is a single row and interleave / zip branches stack in rows.
 * Stages connected to nothing (e.g. what TensorFlow adds through tf.data.Options: autotune,
 * inject_prefetch) go in a row of their own under the chain, marked `detached`; when nothing is
 * linked at all, every stage goes in one row in recording order. Unknown inputs (stages not recorded) are ignored; cycles cannot hang it.
 * Returns [{stage, column, row, detached}] in drawing order.
 */
export function layoutStages(stages) {
  const byId = new Map();
  stages.forEach((s, i) => byId.set(s.id, { stage: s, index: i }));
  const known = (s) => (s.inputs ?? []).filter((up) => byId.has(up));
  const linked = new Set();
  for (const s of stages) {
    for (const up of known(s)) {
      linked.add(up);
      linked.add(s.id);
    }
  }
  const column = new Map();
  const visiting = new Set();
  function depth(id) {
    if (column.has(id)) return column.get(id);
    if (visiting.has(id)) return 0; // a cycle: break it rather than recurse forever
    visiting.add(id);
    let d = 0;
    for (const up of known(byId.get(id).stage)) d = Math.max(d, depth(up) + 1);
    visiting.delete(id);
    column.set(id, d);
    return d;
  }
  if (linked.size === 0) {
    // No links recorded at all (e.g. @leakwidget.stage functions): one row, in call order.
    return stages.map((stage, i) => ({ stage, column: i, row: 0, detached: false }));
  }
  const isDetached = (s) => !linked.has(s.id);
  const chain = stages
    .map((s, i) => ({ stage: s, index: i }))
    .filter(({ stage }) => !isDetached(stage))
    .map(({ stage, index }) => ({ stage, column: depth(stage.id), index }));
  chain.sort((a, b) => a.column - b.column || a.index - b.index);
  const rows = new Map();
  const placed = chain.map(({ stage, column: c }) => {
    const row = rows.get(c) ?? 0;
    rows.set(c, row + 1);
    return { stage, column: c, row, detached: false };
  });
  const nextRow = Math.max(0, ...rows.values());
  stages.filter(isDetached).forEach((stage, i) => {
    placed.push({ stage, column: i, row: nextRow, detached: true });
  });
  return placed;
}

const COLOURS = {
  culprit: "#d62728",
  on: "#2ca02c",
  serial: "#ff7f0e",
  off: "#9e9e9e",
  fixed: "#607d8b",
};

/** Fill colour of a stage: red when bisection blamed it, else by state; fixed stages grey-blue. */
export function stageColour(stage, state, culprits) {
  if ((culprits ?? []).includes(stage.id)) return COLOURS.culprit;
  if (!stage.toggleable) return COLOURS.fixed;
  return COLOURS[state] ?? COLOURS.on;
}

/** Hover text: kind, call site and arguments. */
export function stageTitle(stage) {
  const lines = [`${stage.kind} (${stage.id})`];
  if (stage.site) lines.push(`built at ${stage.site}`);
  const args = Object.entries(stage.args ?? {}).map(([k, v]) => `${k}=${v}`);
  if (args.length) lines.push(args.join(", "));
  if (!stage.toggleable) lines.push("cannot be switched off");
  return lines.join("\n");
}

function draw(model, el) {
  const stages = model.get("stages") ?? [];
  const states = model.get("states") ?? {};
  const culprits = model.get("culprits") ?? [];
  const disabled = Boolean(model.get("disabled"));
  el.replaceChildren();
  el.classList.add("leakwidget-pipeline");
  const chain = document.createElement("div");
  chain.className = "leakwidget-pipeline-chain";
  chain.style.cssText =
    "display:grid;grid-auto-flow:column;gap:4px 22px;align-items:center;" +
    "font:12px sans-serif;padding:4px 0;overflow-x:auto";
  for (const { stage, column, row, detached } of layoutStages(stages)) {
    const state = effectiveState(stage, states);
    const box = document.createElement("button");
    box.type = "button";
    box.className = "leakwidget-stage";
    box.dataset.stageId = stage.id;
    box.dataset.state = state;
    box.dataset.kind = stage.kind;
    box.dataset.toggleable = String(Boolean(stage.toggleable));
    if (culprits.includes(stage.id)) box.dataset.culprit = "true";
    box.title = stageTitle(stage);
    box.textContent = stage.kind;
    const badge = document.createElement("small");
    badge.textContent = state === "on" ? "" : ` (${state})`;
    box.appendChild(badge);
    box.style.cssText =
      `grid-column:${column + 1};grid-row:${row + 1};position:relative;` +
      `border:2px solid ${stageColour(stage, state, culprits)};border-radius:4px;` +
      `background:${state === "off" ? "#eee" : "#fff"};padding:3px 8px;` +
      `text-decoration:${state === "off" ? "line-through" : "none"};` +
      `cursor:${allowedStates(stage).length > 1 && !disabled ? "pointer" : "default"}`;
    if (detached) box.dataset.detached = "true";
    if (column > 0 && !detached) {
      // The arrow from the upstream column.
      const arrow = document.createElement("span");
      arrow.textContent = "\u2192";
      arrow.setAttribute("aria-hidden", "true");
      arrow.style.cssText = "position:absolute;left:-18px;top:50%;transform:translateY(-50%);color:#666";
      box.appendChild(arrow);
    }
    if (allowedStates(stage).length < 2 || disabled) {
      box.disabled = true;
    } else {
      box.addEventListener("click", () => {
        model.set("states", applyClick(model.get("states"), stage));
        model.save_changes();
      });
    }
    chain.appendChild(box);
  }
  el.appendChild(chain);
}

function render({ model, el }) {
  const redraw = () => draw(model, el);
  redraw();
  for (const name of ["stages", "states", "culprits", "disabled"]) {
    model.on(`change:${name}`, redraw);
  }
  return () => {
    for (const name of ["stages", "states", "culprits", "disabled"]) {
      model.off(`change:${name}`, redraw);
    }
  };
}

export default { render };
