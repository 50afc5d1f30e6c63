// Pipeline strip of leakwidget: an anywidget ESM module.
//
// Draws the tf.data / user stages recorded by a watch as a left-to-right chain
// (source -> interleave -> shuffle -> map -> batch -> prefetch ...). Each toggleable stage
// clicks through on -> serial -> off (serial only for parallel stages) and writes the wish
// back into the synced `states` dict; the kernel applies it at the next "Run again". Which
// states a stage can take comes from Python (`stage.states`, leakwidget/stages: Stage.states),
// the one place those rules live.
// Stages blamed by a bisection (synced `culprits`) are filled red. The stages the user's code
// built come first, left to right, wrapping onto more lines when the notebook is narrow;
// TensorFlow's own options (`group: "tensorflow"`) follow on a line of their own, then a key.
// Hovering a stage shows its call site, its arguments, what a click does and, when it cannot
// be switched off or made serial, why (`why`, from Python).
//
// Synced traits (see leakwidget/notebook/strip.py, PipelineStrip):
//   stages:   [{id, kind, site, args, inputs, toggleable, parallel, state, states, group, why}]
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
  culprit: "#c62828",
  on: "#2e7d32",
  serial: "#ef6c00",
  off: "#9e9e9e",
  fixed: "#78909c",
};

/** Border colour of a stage: red when bisection blamed it, else by state; fixed stages grey-blue. */
export function stageColour(stage, state, culprits) {
  if ((culprits ?? []).includes(stage.id)) return COLOURS.culprit;
  if (allowedStates(stage).length < 2) return COLOURS.fixed;
  return COLOURS[state] ?? COLOURS.on;
}

/** The click cycle in words: "click: on → serial → off", or "" when a click does nothing. */
export function cycleText(stage) {
  const allowed = allowedStates(stage);
  return allowed.length < 2 ? "" : `click: ${allowed.join(" \u2192 ")}`;
}

/** Hover text: kind and id, call site, arguments, why it cannot do more, what a click does. */
export function stageTitle(stage, culprit = false) {
  const lines = [`${stage.kind} (${stage.id})`];
  if (culprit) lines.push("Culprit: with this stage on, memory grows (bisection).");
  if (stage.site) lines.push(`built at ${stage.site}`);
  const args = Object.entries(stage.args ?? {}).map(([k, v]) => `${k}=${v}`);
  if (args.length) lines.push(args.join(", "));
  if (stage.why) lines.push(stage.why);
  else if (!stage.toggleable) lines.push("Cannot be switched off.");
  const cycle = cycleText(stage);
  if (cycle) lines.push(`${cycle} (applies at the next Run again)`);
  return lines.join("\n");
}

/** The stages split into the pipeline the user's code built and TensorFlow's own options. */
export function groupStages(stages) {
  const own = (s) => (s.group ?? "pipeline") === "tensorflow";
  return { pipeline: stages.filter((s) => !own(s)), tensorflow: stages.filter(own) };
}

/** The pipeline's columns, left to right: [[stage, ...] per column], branches stacked. */
export function pipelineColumns(stages) {
  const columns = [];
  const laid = layoutStages(stages);
  for (const { stage, column } of laid.filter((p) => !p.detached)) (columns[column] ??= []).push(stage);
  // Stages linked to nothing while others are: after the chain, one column each.
  const chain = columns.filter(Boolean);
  return [...chain, ...laid.filter((p) => p.detached).map(({ stage }) => [stage])];
}

const KEY = [
  ["on", COLOURS.on, "solid", "#fff"],
  ["serial", COLOURS.serial, "solid", "#fff"],
  ["off", COLOURS.off, "dashed", "#f1f1f1"],
  ["not toggleable", COLOURS.fixed, "solid", "#eceff1"],
  ["culprit", COLOURS.culprit, "solid", COLOURS.culprit],
];

function chip(model, stage, states, culprits, disabled) {
  const state = effectiveState(stage, states);
  const culprit = culprits.includes(stage.id);
  const clickable = allowedStates(stage).length > 1 && !disabled;
  const box = document.createElement("button");
  box.type = "button";
  box.className = "leakwidget-stage";
  box.dataset.stageId = stage.id;
  box.dataset.state = state;
  box.dataset.kind = stage.kind;
  box.dataset.toggleable = String(Boolean(stage.toggleable));
  box.dataset.group = stage.group ?? "pipeline";
  if (culprit) box.dataset.culprit = "true";
  box.title = stageTitle(stage, culprit);
  box.textContent = stage.kind;
  if (state !== "on") {
    const badge = document.createElement("small");
    badge.textContent = ` ${state}`;
    box.appendChild(badge);
  }
  const fixed = allowedStates(stage).length < 2;
  const colour = stageColour(stage, state, culprits);
  box.style.cssText =
    `border:2px ${state === "off" && !culprit ? "dashed" : "solid"} ${colour};border-radius:12px;` +
    `background:${culprit ? COLOURS.culprit : fixed ? "#eceff1" : state === "off" ? "#f1f1f1" : "#fff"};` +
    `color:${culprit ? "#fff" : state === "off" || fixed ? "#616161" : "#222"};` +
    `font-weight:${culprit ? "bold" : "normal"};padding:2px 10px;font:inherit;white-space:nowrap;` +
    `text-decoration:${state === "off" ? "line-through" : "none"};` +
    `cursor:${clickable ? "pointer" : "default"};max-width:100%;overflow:hidden;text-overflow:ellipsis`;
  if (culprit) box.textContent = `\u26a0 ${box.textContent}`;
  if (!clickable) {
    // Not `disabled`: a disabled button shows no tooltip, and the tooltip says why.
    box.setAttribute("aria-disabled", "true");
  } else {
    box.addEventListener("click", () => {
      model.set("states", applyClick(model.get("states"), stage));
      model.save_changes();
    });
  }
  return box;
}

function row(label, css = "") {
  const line = document.createElement("div");
  line.style.cssText = `display:flex;flex-wrap:wrap;align-items:center;gap:4px 6px;${css}`;
  if (label) {
    const head = document.createElement("span");
    head.textContent = label;
    head.style.cssText = "color:#555;min-width:9em";
    line.appendChild(head);
  }
  return line;
}

function keyRow() {
  const line = row("", "color:#555;font-size:11px;gap:2px 12px;padding-left:calc(9em + 6px)");
  line.className = "leakwidget-pipeline-key";
  for (const [name, colour, style, fill] of KEY) {
    const item = document.createElement("span");
    const dot = document.createElement("span");
    dot.style.cssText =
      `display:inline-block;width:12px;height:9px;border:2px ${style} ${colour};border-radius:6px;` +
      `background:${fill};vertical-align:middle;margin-right:4px`;
    item.append(dot, name);
    line.appendChild(item);
  }
  return line;
}

function draw(model, el) {
  const stages = model.get("stages") ?? [];
  const states = model.get("states") ?? {};
  const culprits = model.get("culprits") ?? [];
  const disabled = Boolean(model.get("disabled"));
  el.replaceChildren();
  el.classList.add("leakwidget-pipeline");
  if (!stages.length) return;
  const root = document.createElement("div");
  root.style.cssText = "font:12px sans-serif;padding:4px 0;display:grid;gap:5px;max-width:100%";
  const { pipeline, tensorflow } = groupStages(stages);
  if (pipeline.length) {
    const chain = row("Pipeline stages");
    chain.className = "leakwidget-pipeline-chain";
    pipelineColumns(pipeline).forEach((column, i) => {
      if (i > 0) {
        const arrow = document.createElement("span");
        arrow.textContent = "\u2192";
        arrow.setAttribute("aria-hidden", "true");
        arrow.style.color = "#666";
        chain.appendChild(arrow);
      }
      const stack = document.createElement("span");
      stack.style.cssText = "display:inline-flex;flex-direction:column;gap:3px;max-width:100%";
      for (const stage of column) stack.appendChild(chip(model, stage, states, culprits, disabled));
      chain.appendChild(stack);
    });
    root.appendChild(chain);
  }
  if (tensorflow.length) {
    const own = row("TensorFlow options");
    own.className = "leakwidget-pipeline-options";
    own.title = "Switched by TensorFlow itself through tf.data.Options, not stages your code wrote";
    for (const stage of tensorflow) own.appendChild(chip(model, stage, states, culprits, disabled));
    root.appendChild(own);
  }
  root.appendChild(keyRow());
  el.appendChild(root);
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
