// Runs Python code on the 32-bit MicroPython WebAssembly port under Node.js.
// usage: node run.mjs HEAPSIZE CODEFILE DIR[=MOUNT] ...
// Each DIR is copied (recursively, .py and .json files) into the port's filesystem at MOUNT (default: DIR).
// Exit status: 0 when the code finished, 1 on an uncaught Python exception (its traceback is printed).
import { loadMicroPython } from "@micropython/micropython-webassembly-pyscript/micropython.mjs";
import fs from "fs";
import path from "path";

const [heapArg, codeFile, ...dirs] = process.argv.slice(2);
const mp = await loadMicroPython({
  heapsize: parseInt(heapArg, 10),
  stdout: (s) => process.stdout.write(s + "\n"),
  stderr: (s) => process.stderr.write(s + "\n"),
});

function mkdirs(p) {
  let cur = "";
  for (const part of p.split("/").filter(Boolean)) {
    cur += "/" + part;
    try { mp.FS.mkdir(cur); } catch (e) { /* exists */ }
  }
}

function copyTree(src, dst) {
  mkdirs(dst);
  for (const ent of fs.readdirSync(src, { withFileTypes: true })) {
    const s = path.join(src, ent.name);
    const d = dst + "/" + ent.name;
    if (ent.isDirectory()) {
      if (ent.name !== "__pycache__" && ent.name !== "node_modules" && !ent.name.startsWith(".")) copyTree(s, d);
    } else if (/\.(py|json|bin)$/.test(ent.name)) {
      mp.FS.writeFile(d, fs.readFileSync(s));
    }
  }
}

for (const spec of dirs) {
  const [src, mount] = spec.split("=");
  copyTree(src, mount || src);
}

try {
  mp.runPython(fs.readFileSync(codeFile, "utf8"));
} catch (e) {
  // Print only the Python traceback, never the minified JS around it.
  process.stdout.write((e && e.message ? e.message : String(e)) + "\n");
  process.exit(1);
}
