// Logic of the pipeline strip, run with: node --test js/tests/
import { test } from "node:test";
import assert from "node:assert/strict";

import widget, {
  applyClick,
  cycleText,
  effectiveState,
  groupStages,
  layoutStages,
  nextState,
  pipelineColumns,
  stageColour,
  stageTitle,
} from "../src/pipeline.js";

// The states a stage can take, as Python's Stage.states computes them.
const statesOf = ({ toggleable, parallel }) =>
  ["on", "serial", "off"].filter((s) => s === "on" || (s === "serial" && parallel) || (s === "off" && toggleable));

const stage = (id, kind, inputs = [], extra = {}) => {
  const s = { id, kind, inputs, site: `train.py:${id.length}`, args: {}, toggleable: true,
    parallel: false, state: "on", ...extra };
  return { states: statesOf(s), ...s };
};

test("a parallel stage cycles on -> serial -> off -> on", () => {
  const s = stage("map@3", "map", [], { parallel: true });
  assert.equal(nextState(s, "on"), "serial");
  assert.equal(nextState(s, "serial"), "off");
  assert.equal(nextState(s, "off"), "on");
});

test("a sequential stage skips serial", () => {
  const s = stage("shuffle@2", "shuffle");
  assert.equal(nextState(s, "on"), "off");
  assert.equal(nextState(s, "off"), "on");
});

test("a fixed stage never changes state", () => {
  const s = stage("source@0", "from_tensor_slices", [], { toggleable: false });
  assert.equal(nextState(s, "on"), "on");
  assert.deepEqual(applyClick({}, s), { "source@0": "on" });
});

test("a click writes a new states dict and leaves the old one alone", () => {
  const s = stage("prefetch@5", "prefetch", [], { parallel: true });
  const before = { other: "off" };
  const after = applyClick(before, s);
  assert.deepEqual(after, { other: "off", "prefetch@5": "serial" });
  assert.deepEqual(before, { other: "off" });
  assert.deepEqual(applyClick(after, s), { other: "off", "prefetch@5": "off" });
});

test("the drawn state prefers the user's wish, then the recorded state", () => {
  const s = stage("map@3", "map", [], { state: "serial" });
  assert.equal(effectiveState(s, {}), "serial");
  assert.equal(effectiveState(s, { "map@3": "off" }), "off");
  assert.equal(effectiveState(s, { "map@3": "bogus" }), "serial");
});

test("a linear pipeline is laid out left to right in one row", () => {
  const stages = [
    stage("prefetch@5", "prefetch", ["batch@4"]),
    stage("source@0", "range"),
    stage("batch@4", "batch", ["map@3"]),
    stage("map@3", "map", ["shuffle@2"]),
    stage("shuffle@2", "shuffle", ["source@0"]),
  ];
  const laid = layoutStages(stages);
  assert.deepEqual(laid.map((p) => p.stage.kind), ["range", "shuffle", "map", "batch", "prefetch"]);
  assert.deepEqual(laid.map((p) => p.column), [0, 1, 2, 3, 4]);
  assert.ok(laid.every((p) => p.row === 0));
});

test("branches share a column in separate rows, joins come after both", () => {
  const stages = [
    stage("a", "range"),
    stage("b", "range"),
    stage("z", "zip", ["a", "b"]),
    stage("m", "map", ["z", "unknown-upstream"]),
  ];
  const laid = layoutStages(stages);
  const where = Object.fromEntries(laid.map((p) => [p.stage.id, [p.column, p.row]]));
  assert.deepEqual(where, { a: [0, 0], b: [0, 1], z: [1, 0], m: [2, 0] });
});

test("stages linked to nothing go in their own row under the chain", () => {
  const stages = [
    stage("autotune", "autotune"),
    stage("map@3", "map"),
    stage("inject_prefetch", "inject_prefetch"),
    stage("batch@4", "batch", ["map@3"]),
    stage("prefetch@5", "prefetch", ["batch@4"]),
  ];
  const laid = layoutStages(stages);
  const where = Object.fromEntries(laid.map((p) => [p.stage.id, [p.column, p.row, p.detached]]));
  assert.deepEqual(where, {
    "map@3": [0, 0, false],
    "batch@4": [1, 0, false],
    "prefetch@5": [2, 0, false],
    autotune: [0, 1, true],
    inject_prefetch: [1, 1, true],
  });
  // Without any link, stages form one row in the order they were recorded.
  const lone = layoutStages([stage("a", "grow"), stage("b", "augment")]);
  assert.deepEqual(lone.map((p) => [p.column, p.row, p.detached]), [[0, 0, false], [1, 0, false]]);
});

test("a cycle in inputs does not hang the layout", () => {
  const laid = layoutStages([stage("a", "map", ["b"]), stage("b", "map", ["a"])]);
  assert.equal(laid.length, 2);
});

test("colour: culprit red beats state; fixed stages have their own colour", () => {
  const s = stage("map@3", "map");
  assert.equal(stageColour(s, "on", ["map@3"]), "#c62828");
  assert.notEqual(stageColour(s, "on", []), stageColour(s, "off", []));
  assert.notEqual(stageColour(s, "serial", []), stageColour(s, "on", []));
  const fixed = stage("src", "range", [], { toggleable: false });
  assert.notEqual(stageColour(fixed, "on", []), stageColour(s, "on", []));
});

test("hover text names the call site and arguments", () => {
  const s = stage("map@3", "map", [], { site: "/w/train.py:12", args: { num_parallel_calls: "8" } });
  const title = stageTitle(s);
  assert.match(title, /\/w\/train\.py:12/);
  assert.match(title, /num_parallel_calls=8/);
});

test("hover text says why a stage cannot be switched off or made serial, and what a click does", () => {
  const fixed = stage("batch@4", "batch", [], { toggleable: false, why: "Cannot be switched off: it makes the batches." });
  assert.match(stageTitle(fixed), /Cannot be switched off: it makes the batches/);
  assert.equal(cycleText(fixed), "");
  const plain = stage("map@3", "map", [], { why: "No serial form: it already works on one element at a time." });
  assert.match(stageTitle(plain), /No serial form/);
  assert.match(stageTitle(plain), /click: on \u2192 off/);
  const parallel = stage("map@5", "map", [], { parallel: true });
  assert.match(stageTitle(parallel), /click: on \u2192 serial \u2192 off/);
  assert.match(stageTitle(parallel, true), /Culprit/);
});

test("TensorFlow's own options are grouped apart from the user's stages", () => {
  const stages = [
    stage("autotune", "autotune", [], { group: "tensorflow" }),
    stage("map@3", "map"),
    stage("batch@4", "batch", ["map@3"]),
    stage("inject_prefetch", "inject_prefetch", [], { group: "tensorflow" }),
  ];
  const { pipeline, tensorflow } = groupStages(stages);
  assert.deepEqual(pipeline.map((s) => s.id), ["map@3", "batch@4"]);
  assert.deepEqual(tensorflow.map((s) => s.id), ["autotune", "inject_prefetch"]);
  // Branches stack in one column; stages linked to nothing come after the chain.
  const columns = pipelineColumns([
    stage("a", "range"), stage("b", "range"), stage("z", "zip", ["a", "b"]), stage("u", "grow"),
  ]);
  assert.deepEqual(columns.map((c) => c.map((s) => s.id)), [["a", "b"], ["z"], ["u"]]);
});

// A minimal DOM, only what render() touches, so the click wiring is exercised without a browser.
class FakeElement {
  constructor(tag) {
    this.tagName = tag; this.children = []; this.dataset = {}; this.style = {}; this.listeners = {};
    this.attributes = {}; this.textContent = "";
    this.classList = { items: new Set(), add: (c) => this.classList.items.add(c) };
  }
  appendChild(child) { this.children.push(child); return child; }
  append(...items) { for (const i of items) this.children.push(i); }
  replaceChildren() { this.children = []; }
  setAttribute(k, v) { this.attributes[k] = v; }
  addEventListener(type, fn) { this.listeners[type] = fn; }
}

const chips = (el) => {
  const out = [];
  const walk = (node) => {
    if (node && node.dataset && node.dataset.stageId) out.push(node);
    for (const c of (node && node.children) || []) walk(c);
  };
  walk(el);
  return out;
};

test("render draws one chip per stage, TensorFlow's options apart, and a click saves the new states", () => {
  globalThis.document = { createElement: (tag) => new FakeElement(tag) };
  const values = {
    stages: [
      stage("src", "range", [], { toggleable: false, why: "Cannot be switched off: a source." }),
      stage("map@3", "map", ["src"], { parallel: true }),
      stage("autotune", "autotune", [], { parallel: true, group: "tensorflow" }),
    ],
    states: {},
    culprits: ["map@3"],
    disabled: false,
  };
  const handlers = {};
  let saved = 0;
  const model = {
    get: (k) => values[k],
    set: (k, v) => { values[k] = v; },
    save_changes: () => { saved += 1; handlers["change:states"]?.(); },
    on: (e, fn) => { handlers[e] = fn; },
    off: (e) => { delete handlers[e]; },
  };
  const el = new FakeElement("div");
  const cleanup = widget.render({ model, el });
  assert.ok(el.classList.items.has("leakwidget-pipeline"));
  const boxes = () => chips(el);
  assert.deepEqual(boxes().map((b) => b.dataset.stageId), ["src", "map@3", "autotune"]);
  assert.deepEqual(boxes().map((b) => b.dataset.group), ["pipeline", "pipeline", "tensorflow"]);
  // A fixed stage is not clickable but keeps its tooltip (a disabled button would hide it).
  assert.equal(boxes()[0].attributes["aria-disabled"], "true");
  assert.equal(boxes()[0].listeners.click, undefined);
  assert.match(boxes()[0].title, /Cannot be switched off/);
  assert.equal(boxes()[1].dataset.culprit, "true");
  boxes()[1].listeners.click();
  assert.equal(saved, 1);
  assert.deepEqual(values.states, { "map@3": "serial" });
  assert.equal(boxes()[1].dataset.state, "serial"); // redrawn from the new state
  cleanup();
  assert.deepEqual(Object.keys(handlers), []);
  delete globalThis.document;
});
