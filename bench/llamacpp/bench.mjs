#!/usr/bin/env node
// Reference speed of llama.cpp's CPU backend on one GGUF: prefill of a fixed prompt as one batch, then greedy decode
// of one token per llama_decode, repeated; prints one JSON line with the medians. See bench/README.md.
import {statSync} from "node:fs";
import path from "node:path";
import {
    deterministicTokenIds, fail, greedyNext, loadLlamaCpu, median, nodeLlamaCppVersion, nonNegativeInt,
    parseCommandLine, positiveInt, readTokenIdsFile, round, vocabularySize,
} from "./lib.mjs";

const usage = `usage: node bench.mjs --model FILE.gguf [options]
  --threads N         llama.cpp CPU threads (default 1)
  --prompt-tokens N   prompt length when ids are generated (default 64)
  --prompt-file FILE  prompt token ids (JSON array or whitespace/comma separated) instead of generated ids
  --seed N            seed of the generated prompt ids (default 1)
  --decode N          greedy tokens to decode after the prompt (default 32)
  --repeats R         measured repetitions; medians are reported (default 3)
  --warmup W          unmeasured repetitions first (default 1; 0 measures a cold first run)
  --no-mmap           read the whole model into memory instead of mmapping it
  --lazy              node-llama-cpp lazyMode: read supported tensors on demand (mmap only)
  --flash-attention   turn flash attention on (default off, as in the golden fixtures)
  --verbose           show llama.cpp's log on stderr`;

const args = parseCommandLine({
    model: {type: "string"},
    threads: {type: "string", default: "1"},
    "prompt-tokens": {type: "string", default: "64"},
    "prompt-file": {type: "string"},
    seed: {type: "string", default: "1"},
    decode: {type: "string", default: "32"},
    repeats: {type: "string", default: "3"},
    warmup: {type: "string", default: "1"},
    "no-mmap": {type: "boolean", default: false},
    lazy: {type: "boolean", default: false},
    "flash-attention": {type: "boolean", default: false},
    verbose: {type: "boolean", default: false},
}, usage);

const threads = positiveInt("threads", args.threads);
const decodeTokens = positiveInt("decode", args.decode);
const repeats = positiveInt("repeats", args.repeats);
const warmup = nonNegativeInt("warmup", args.warmup);
const mmap = !args["no-mmap"];
if (args.lazy && !mmap) fail("--lazy needs mmap; drop --no-mmap");

const {llama, model, logs, loadSeconds} = await loadLlamaCpu({
    modelPath: args.model, threads, mmap, lazy: args.lazy, checkTensors: false, verbose: args.verbose,
});
const vocabSize = vocabularySize(model);
const prompt = args["prompt-file"]
    ? readTokenIdsFile(args["prompt-file"], vocabSize)
    : deterministicTokenIds(positiveInt("prompt-tokens", args["prompt-tokens"]), vocabSize,
        nonNegativeInt("seed", args.seed));
if (prompt.length === 0) fail("the prompt has no tokens");

const context = await model.createContext({
    contextSize: prompt.length + decodeTokens + 16,
    // n_batch (= n_ubatch in node-llama-cpp) covers the whole prompt, so prefill is a single llama_decode call.
    batchSize: prompt.length,
    sequences: 1,
    threads: {ideal: threads, min: threads},
    flashAttention: args["flash-attention"],
    ignoreMemorySafetyChecks: true,
});
const sequence = context.getSequence();

async function runOnce() {
    await sequence.clearHistory();
    const prefillInput = prompt.map((id, index) => (index === prompt.length - 1 ? [id, greedyNext] : id));
    const prefillStart = performance.now();
    const prefillOutput = await sequence.controlledEvaluate(prefillInput);
    const prefillSeconds = (performance.now() - prefillStart) / 1000;

    let token = prefillOutput[prompt.length - 1]?.next?.token;
    const generated = [token];
    const decodeStart = performance.now();
    for (let step = 0; step < decodeTokens; step++) {
        const output = await sequence.controlledEvaluate([[token, greedyNext]]);
        token = output[0]?.next?.token;
        if (token == null) fail(`llama.cpp returned no token at decode step ${step}`);
        generated.push(token);
    }
    const decodeSeconds = (performance.now() - decodeStart) / 1000;
    return {prefillTps: prompt.length / prefillSeconds, decodeTps: decodeTokens / decodeSeconds, generated};
}

for (let i = 0; i < warmup; i++) await runOnce();
const runs = [];
for (let i = 0; i < repeats; i++) runs.push(await runOnce());

const firstGenerated = JSON.stringify(runs[0].generated);
const result = {
    prefill_tps: round(median(runs.map((run) => run.prefillTps)), 2),
    decode_tps: round(median(runs.map((run) => run.decodeTps)), 2),
    threads,
    model: path.basename(args.model),
    model_path: path.resolve(args.model),
    model_file_bytes: statSync(args.model).size,
    arch: model.fileInfo.metadata?.general?.architecture ?? null,
    n_vocab: vocabSize,
    prompt_tokens: prompt.length,
    decode_tokens: decodeTokens,
    repeats,
    warmup,
    mmap,
    lazy: args.lazy,
    flash_attention: args["flash-attention"],
    prefill_tps_runs: runs.map((run) => round(run.prefillTps, 2)),
    decode_tps_runs: runs.map((run) => round(run.decodeTps, 2)),
    // Greedy decoding of the same prompt must give the same ids every repetition; false means the runs differ.
    greedy_repeatable: runs.every((run) => JSON.stringify(run.generated) === firstGenerated),
    load_s: round(loadSeconds),
    max_rss_mib: round(process.resourceUsage().maxRSS / 1024, 1),
    model_buffers_mib: logs.modelBuffersMiB(),
    cpu_backend: logs.cpuBackend(),
    llama_cpp_release: llama.llamaCppRelease?.release ?? null,
    node_llama_cpp: nodeLlamaCppVersion(),
};
console.log(JSON.stringify(result));

await context.dispose();
await model.dispose();
await llama.dispose();
