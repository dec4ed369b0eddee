// Renders every (template, conversation) pair of tests/data/templates/cases.json with @huggingface/jinja, an
// implementation independent of diskformer's, into tests/data/templates/<template>.<conversation>.expected.txt and
// lists the pairs in expected.json (pairs where @huggingface/jinja fails are listed with the error and no file).
//
//   npm i --prefix /tmp/hfjinja @huggingface/jinja
//   NODE_PATH=/tmp/hfjinja/node_modules node tools/templates/render_expected.cjs [templates-dir]
"use strict";

const fs = require("fs");
const path = require("path");
const { Template } = require("@huggingface/jinja");

const dir = path.resolve(process.argv[2] || path.join(__dirname, "..", "..", "tests", "data", "templates"));
const cases = JSON.parse(fs.readFileSync(path.join(dir, "cases.json"), "utf8"));

// strftime_now pinned to cases.now in UTC (diskformer's test renders with the same clock and TZ=UTC): the library's
// own strftime_now reads `new Date()` in local time, so the clock and the zone are fixed here.
process.env.TZ = "UTC";
const RealDate = Date;
global.Date = class extends RealDate {
  constructor(...args) {
    if (args.length === 0) super(cases.now * 1000);
    else super(...args);
  }
  static now() {
    return cases.now * 1000;
  }
};

// The package's exports hide package.json; read it next to the resolved entry point.
function packageVersion() {
  let d = path.dirname(require.resolve("@huggingface/jinja"));
  while (!fs.existsSync(path.join(d, "package.json"))) d = path.dirname(d);
  return JSON.parse(fs.readFileSync(path.join(d, "package.json"), "utf8")).version;
}

const manifest = { generator: "@huggingface/jinja " + packageVersion(), pairs: [] };
for (const [tname, t] of Object.entries(cases.templates)) {
  const source = fs.readFileSync(path.join(dir, t.file), "utf8");
  const template = new Template(source);
  for (const [cname, c] of Object.entries(cases.conversations)) {
    const context = {
      messages: c.messages,
      bos_token: t.bos_token,
      eos_token: t.eos_token,
      add_generation_prompt: c.add_generation_prompt,
      enable_thinking: c.enable_thinking,
    };
    if (c.tools) context.tools = c.tools;
    const entry = { template: tname, conversation: cname };
    try {
      let out = template.render(context);
      // Where @huggingface/jinja and llama.cpp differ, the expectation follows llama.cpp (cases.json says why).
      for (const d of cases.divergences || []) {
        if (d.template !== tname || d.conversation !== cname) continue;
        for (const [from, to] of d.replace) {
          if (out.split(from).length !== 2) throw new Error(`divergence text ${JSON.stringify(from)} is not in the output exactly once`);
          out = out.replace(from, to);
        }
        entry.adjusted_for_llama_cpp = d.why;
      }
      entry.expected = `${tname}.${cname}.expected.txt`;
      fs.writeFileSync(path.join(dir, entry.expected), out);
    } catch (e) {
      entry.error = String(e.message || e);
    }
    manifest.pairs.push(entry);
  }
}
fs.writeFileSync(path.join(dir, "expected.json"), JSON.stringify(manifest, null, 2) + "\n");
console.log(`${manifest.pairs.filter((p) => p.expected).length} renderings, ` +
            `${manifest.pairs.filter((p) => p.error).length} errors -> ${dir}`);
