// The chart legend, run with: node --test js/tests/
import { test } from "node:test";
import assert from "node:assert/strict";

import widget, { entryText, workersRow } from "../src/legend.js";

test("an entry says its verdict and slope after its label", () => {
  assert.equal(entryText({ kind: "leak", slope: "+32 KiB/it" }), "leak, +32 KiB/it");
  assert.equal(entryText({ kind: "retention", slope: "+8 KiB/it" }), "allocator, +8 KiB/it");
  assert.equal(entryText({ kind: "running", slope: "" }), "");
});

class FakeElement {
  constructor(tag) {
    this.tagName = tag; this.children = []; this.dataset = {}; this.style = {}; this.textContent = "";
    this.attributes = {}; this.width = 0;
    this.classList = { items: new Set(), add: (c) => this.classList.items.add(c) };
  }
  appendChild(child) { this.children.push(child); return child; }
  append(...items) { for (const i of items) this.children.push(i); }
  replaceChildren() { this.children = []; }
  setAttribute(k, v) { this.attributes[k] = v; }
  getBoundingClientRect() { return { width: this.width }; }
}

test("render draws the entries and reports the width the charts have", () => {
  globalThis.document = { createElement: (tag) => new FakeElement(tag) };
  let observed = null;
  globalThis.ResizeObserver = class {
    constructor(fn) { this.fn = fn; }
    observe(el) { observed = this; this.el = el; }
    disconnect() { observed = null; }
  };
  const values = {
    entries: [{ label: "run 1", colour: "#1f77b4", kind: "leak", slope: "+1 MiB/it" }],
    phases: [{ label: "setup", colour: "#90a4ae" }],
    width: 0,
  };
  const handlers = {};
  const model = {
    get: (k) => values[k],
    set: (k, v) => { values[k] = v; },
    save_changes: () => {},
    on: (e, fn) => { handlers[e] = fn; },
    off: (e) => { delete handlers[e]; },
  };
  const el = new FakeElement("div");
  el.width = 1180.4;
  const cleanup = widget.render({ model, el });
  assert.equal(values.width, 1180);
  assert.equal(el.children.length, 1); // no children watched: no children's row
  const row = el.children[0];
  const kinds = row.children.filter((c) => c.className === "leakwidget-legend-entry").map((c) => c.dataset.kind);
  assert.deepEqual(kinds, ["leak"]);
  assert.ok(row.children.some((c) => c.className === "leakwidget-legend-phase"));
  // A resize of a few pixels is not worth a message; a real one is.
  el.width = 1184; observed.fn();
  assert.equal(values.width, 1180);
  el.width = 880; observed.fn();
  assert.equal(values.width, 880);
  cleanup();
  assert.equal(observed, null);
  assert.deepEqual(Object.keys(handlers), []);
  delete globalThis.document;
  delete globalThis.ResizeObserver;
});

test("the children's row names each line, marks those copying, and counts those not drawn", () => {
  globalThis.document = { createElement: (tag) => new FakeElement(tag) };
  const row = workersRow(
    [
      { label: "worker 1 (copying)", colour: "#2ca02c", copying: true },
      { label: "worker 2", colour: "#9467bd", copying: false },
    ],
    "+3 more workers not shown",
  );
  const entries = row.children.filter((c) => c.className === "leakwidget-legend-worker");
  assert.deepEqual(entries.map((c) => c.children[1].textContent), ["worker 1 (copying)", "worker 2"]);
  assert.deepEqual(entries.map((c) => c.dataset.copying), ["true", "false"]);
  assert.equal(row.children.at(-1).textContent, "+3 more workers not shown");
  assert.equal(workersRow([], "").children.length, 1); // only what the lines are
  delete globalThis.document;
});
