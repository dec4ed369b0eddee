#!/usr/bin/env node
// diskformer against llama.cpp on the same GGUF files and thread counts, all weights in RAM: runs
// `diskformer bench --resident` and bench.mjs (this folder) one after the other for every (model, threads),
// prints one JSON line per pair on stdout and a Markdown table with the ratios and the weight bandwidth each
// engine's decode implies on stderr. Needs node-llama-cpp installed here (see bench/README.md, setup.sh) and a
// built diskformer. Run it on an otherwise idle machine: the two engines run one at a time, never together.
import {execFileSync} from "node:child_process";
import path from "node:path";
import {fileURLToPath} from "node:url";
import {fail, parseCommandLine, positiveInt, round} from "./lib.mjs";

const usage = `usage: node compare.mjs --model A.gguf[,B.gguf...] [options]
  --diskformer BIN    the diskformer binary (default: build/diskformer of this checkout)
  --threads LIST      comma-separated thread counts (default 1,2)
  --prompt-tokens N   prompt length, evaluated as one batch (default 64)
  --decode N          greedy tokens decoded after the prompt (default 32)
  --repeats R         measured repetitions of each engine (default 3): diskformer reports tokens over time of
                      all of them, llama.cpp the median after one unmeasured warm-up run
  --membw LIST        measured memory bandwidth per thread count in GB/s, e.g. 1:18.7,2:37.3 (bench/scripts/
                      membw.sh), to print the implied bandwidth as a share of it`;

const here = path.dirname(fileURLToPath(import.meta.url));
const args = parseCommandLine({
    model: {type: "string"},
    diskformer: {type: "string", default: path.join(here, "..", "..", "build", "diskformer")},
    threads: {type: "string", default: "1,2"},
    "prompt-tokens": {type: "string", default: "64"},
    decode: {type: "string", default: "32"},
    repeats: {type: "string", default: "3"},
    membw: {type: "string", default: ""},
}, usage);

const models = args.model.split(",").filter((m) => m.length > 0);
const threadCounts = args.threads.split(",").map((t) => positiveInt("threads", t));
const promptTokens = positiveInt("prompt-tokens", args["prompt-tokens"]);
const decode = positiveInt("decode", args.decode);
const repeats = positiveInt("repeats", args.repeats);
const membw = new Map();
for (const item of args.membw.split(",").filter((s) => s.length > 0)) {
    const [t, gbs] = item.split(":");
    if (!(Number(gbs) > 0)) fail(`--membw: '${item}' is not THREADS:GB/s`);
    membw.set(positiveInt("membw threads", t), Number(gbs));
}

// A command's JSON result: its whole stdout, or else the last line of it (bench prints a report first).
function lastJsonLine(cmd, argv) {
    let out;
    try {
        out = execFileSync(cmd, argv, {encoding: "utf8", stdio: ["ignore", "pipe", "pipe"], maxBuffer: 1 << 26});
    } catch (error) {
        fail(`${cmd} ${argv.join(" ")} failed (exit ${error.status}):\n${error.stderr ?? error.message}`);
    }
    const lines = out.trim().split("\n");
    try {
        return JSON.parse(out);
    } catch {
        // not a single JSON document
    }
    try {
        return JSON.parse(lines[lines.length - 1]);
    } catch {
        fail(`${cmd} ${argv.join(" ")}: the last line of its output is not JSON: ${lines[lines.length - 1]}`);
    }
}

// Bytes of weights one decode step reads: every non-expert tensor (the head included) plus the chosen
// experts of each MoE layer.
function weightsPerToken(model) {
    const info = lastJsonLine(args.diskformer, ["inspect", model, "--json"]);
    const m = info.memory;
    if (!m || !(m.other_bytes > 0)) fail(`diskformer inspect ${model} --json gave no memory summary`);
    return m.other_bytes + (m.active_expert_bytes_per_token ?? 0);
}

const rows = [];
for (const model of models) {
    const bytes = weightsPerToken(model);
    for (const threads of threadCounts) {
        process.stderr.write(`${path.basename(model)}, ${threads} thread(s): diskformer ...`);
        const df = lastJsonLine(args.diskformer, [
            "bench", "-m", model, "--resident", "-p", `${promptTokens}`, "-n", `${decode}`, "-t", `${threads}`,
            "-r", `${repeats}`, "--json"]);
        process.stderr.write(" llama.cpp ...\n");
        const ll = lastJsonLine(process.execPath, [
            path.join(here, "bench.mjs"), "--model", model, "--threads", `${threads}`, "--prompt-tokens",
            `${promptTokens}`, "--decode", `${decode}`, "--repeats", `${repeats}`]);
        const row = {
            model: path.basename(model), threads, prompt_tokens: promptTokens, decode_tokens: decode,
            weights_per_token_bytes: bytes,
            diskformer: {prefill_tps: round(df.prefill_tps, 2), decode_tps: round(df.decode_tps, 2),
                peak_rss_bytes: df.peak_rss_bytes},
            llamacpp: {prefill_tps: ll.prefill_tps, decode_tps: ll.decode_tps, max_rss_mib: ll.max_rss_mib},
            prefill_ratio: round(df.prefill_tps / ll.prefill_tps, 3),
            decode_ratio: round(df.decode_tps / ll.decode_tps, 3),
            implied_decode_gbs: {diskformer: round(bytes * df.decode_tps / 1e9, 2),
                llamacpp: round(bytes * ll.decode_tps / 1e9, 2)},
            membw_gbs: membw.get(threads) ?? null,
        };
        console.log(JSON.stringify(row));
        rows.push(row);
    }
}

const share = (gbs, ceiling) => (ceiling ? ` (${Math.round(100 * gbs / ceiling)} %)` : "");
const lines = [
    "| model | threads | prefill tok/s diskformer / llama.cpp (ratio) | decode tok/s diskformer / llama.cpp (ratio) | implied decode GB/s diskformer / llama.cpp |",
    "|---|---|---|---|---|"];
for (const r of rows) {
    lines.push(`| ${r.model} | ${r.threads} | ${r.diskformer.prefill_tps} / ${r.llamacpp.prefill_tps} (${r.prefill_ratio}) | ` +
        `${r.diskformer.decode_tps} / ${r.llamacpp.decode_tps} (${r.decode_ratio}) | ` +
        `${r.implied_decode_gbs.diskformer}${share(r.implied_decode_gbs.diskformer, r.membw_gbs)} / ` +
        `${r.implied_decode_gbs.llamacpp}${share(r.implied_decode_gbs.llamacpp, r.membw_gbs)} |`);
}
process.stderr.write(`${lines.join("\n")}\n`);
