// Build the pipeline strip into the Python package: a plain copy (the module has no imports,
// so there is nothing to bundle). Run: node js/build.mjs   (or npm run build in js/).
import { copyFileSync, mkdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const source = join(here, "src", "pipeline.js");
const target = join(here, "..", "leakwidget", "static", "pipeline.js");
mkdirSync(dirname(target), { recursive: true });
copyFileSync(source, target);
console.log(`built ${target}`);
