// Chart legend of leakwidget: an anywidget ESM module.
//
// The RSS chart's legend lives here, under the plot and outside it, so it never covers a line:
// one entry per run (a swatch in the run's colour, its label, its verdict and its slope), then
// the keys of the shaded phases and of the dashed trend; when the watched process has children,
// a second row: each child's line ("worker 3 (copying)"), and how many are not drawn. Entries wrap onto more lines when the
// notebook is narrow.
//
// It is also the dashboard's ruler: it reports its own width in pixels (synced `width`), which
// is the charts' width, so the kernel chooses tick counts, label placement and the number of
// points it sends from the pixels there are.
//
// Synced traits (see leakwidget/notebook/charts.py, ChartLegend):
//   entries: [{label, colour, kind, slope, current}]   kind: leak | retention | plateau |
//            stable | inconclusive | running
//   phases:  [{label, colour}]                          e.g. setup, warm-up
//   workers: [{label, colour, copying}]                 each child's private memory (its line)
//   workers_note: string                                e.g. "+3 more workers not shown"
//   width:   number                                     written by this view
//
// The pure functions are exported for `node --test js/tests/`.

export const KIND_COLOURS = {
  leak: "#c62828",
  retention: "#6a1b9a",
  plateau: "#ef6c00",
  stable: "#2e7d32",
  inconclusive: "#616161",
  running: "#1565c0",
};

/** The words of an entry after its label: "leak, +32 KiB/it" (nothing when both are empty). */
export function entryText(entry) {
  const kind = entry.kind === "retention" ? "allocator" : entry.kind;
  return [kind === "running" ? "" : kind, entry.slope ?? ""].filter(Boolean).join(", ");
}

function element(tag, css, text) {
  const el = document.createElement(tag);
  if (css) el.style.cssText = css;
  if (text !== undefined) el.textContent = text;
  return el;
}

function swatch(colour, dashed, thickness = 3) {
  const line = element(
    "span",
    `display:inline-block;width:22px;height:0;border-top:${dashed ? "2px dashed" : `${thickness}px solid`} ${colour};` +
      "vertical-align:middle;margin-right:5px",
  );
  line.setAttribute("aria-hidden", "true");
  return line;
}

const ROW =
  "display:flex;flex-wrap:wrap;gap:2px 16px;align-items:center;font:12px sans-serif;" +
  "color:#333;padding:2px 0 2px 60px";

/** The children's row: what their lines are, one entry per line, and those not drawn. */
export function workersRow(workers, note) {
  const row = element("div", ROW);
  row.className = "leakwidget-legend-workers";
  row.appendChild(element("span", "color:#555", "private memory of each child:"));
  for (const worker of workers) {
    const item = element("span", "white-space:nowrap");
    item.className = "leakwidget-legend-worker";
    item.dataset.copying = worker.copying ? "true" : "false";
    item.appendChild(swatch(worker.colour, false, 2));
    item.appendChild(element("span", "", worker.label));
    row.appendChild(item);
  }
  if (note) row.appendChild(element("span", "color:#555;font-style:italic", note));
  return row;
}

function draw(model, el) {
  el.replaceChildren();
  el.classList.add("leakwidget-legend");
  const row = element("div", ROW);
  for (const entry of model.get("entries") ?? []) {
    const item = element("span", "white-space:nowrap");
    item.className = "leakwidget-legend-entry";
    item.dataset.kind = entry.kind ?? "";
    item.appendChild(swatch(entry.colour, false));
    item.appendChild(element("span", entry.current ? "font-weight:bold" : "", entry.label));
    const words = entryText(entry);
    if (words) {
      const colour = KIND_COLOURS[entry.kind] ?? "#333";
      item.appendChild(element("span", `color:${colour};margin-left:6px`, words));
    }
    row.appendChild(item);
  }
  for (const phase of model.get("phases") ?? []) {
    const item = element("span", "white-space:nowrap;color:#555");
    item.className = "leakwidget-legend-phase";
    const box = element(
      "span",
      `display:inline-block;width:14px;height:10px;background:${phase.colour};opacity:.5;` +
        "vertical-align:middle;margin-right:5px;border:1px solid #bbb",
    );
    item.append(box, phase.label);
    row.appendChild(item);
  }
  if ((model.get("entries") ?? []).length) {
    const item = element("span", "white-space:nowrap;color:#555");
    item.className = "leakwidget-legend-trend";
    item.append(swatch("#555", true), "trend");
    row.appendChild(item);
  }
  el.appendChild(row);
  const workers = model.get("workers") ?? [];
  if (workers.length) el.appendChild(workersRow(workers, model.get("workers_note") ?? ""));
}

function render({ model, el }) {
  const redraw = () => draw(model, el);
  redraw();
  model.on("change:entries", redraw);
  model.on("change:phases", redraw);
  model.on("change:workers", redraw);
  model.on("change:workers_note", redraw);
  // The width the charts have: sent when it changes by a few pixels (not on every frame of a
  // resize), so the kernel redraws its axes for the new size.
  let sent = 0;
  const report = () => {
    const width = Math.round(el.getBoundingClientRect().width);
    if (width > 0 && Math.abs(width - sent) >= 8) {
      sent = width;
      model.set("width", width);
      model.save_changes();
    }
  };
  const observer = new ResizeObserver(report);
  observer.observe(el);
  report();
  return () => {
    observer.disconnect();
    model.off("change:entries", redraw);
    model.off("change:phases", redraw);
    model.off("change:workers", redraw);
    model.off("change:workers_note", redraw);
  };
}

export default { render };
