#!/usr/bin/env node
// Proves that llama.cpp accepts a GGUF (e.g. one written by diskformer's make-model) and runs it: loads it on the CPU
// backend with tensor validation, generates a few greedy tokens, and checks their probabilities are finite.
// With --golden it also replays a golden JSON's greedy cases and compares the ids. Exit 0 = ok, 1 = failed, 2 = usage.
import {readFileSync, statSync} from "node:fs";
import path from "node:path";
import {
    deterministicTokenIds, fail, greedyNext, loadLlamaCpu, nodeLlamaCppVersion, parseCommandLine, positiveInt,
    vocabularySize,
} from "./lib.mjs";

const usage = `usage: node check.mjs --model FILE.gguf [options]
  --tokens N            greedy tokens to generate (default 8)
  --prompt-ids LIST     prompt as comma-separated ids (default: --text through the GGUF's tokenizer)
  --text TEXT           prompt text (default "The quick brown fox"); without a tokenizer in the GGUF, 8
                        deterministic ids are used instead
  --golden FILE.json    also replay the golden file's greedy cases ("generation") and compare the ids
  --no-check-tensors    skip llama.cpp's tensor data validation (slow on multi-GB files)
  --threads N           CPU threads (default 1, as the golden fixtures)
  --verbose             show llama.cpp's log on stderr`;

const args = parseCommandLine({
    model: {type: "string"},
    tokens: {type: "string", default: "8"},
    "prompt-ids": {type: "string"},
    text: {type: "string", default: "The quick brown fox"},
    golden: {type: "string"},
    "no-check-tensors": {type: "boolean", default: false},
    threads: {type: "string", default: "1"},
    verbose: {type: "boolean", default: false},
}, usage);
const tokensToGenerate = positiveInt("tokens", args.tokens);
const threads = positiveInt("threads", args.threads);

const report = {ok: false, model: path.basename(args.model), node_llama_cpp: nodeLlamaCppVersion()};
function finish(ok, extra = {}) {
    Object.assign(report, extra, {ok});
    console.log(JSON.stringify(report));
    process.exit(ok ? 0 : 1);
}

let loaded;
try {
    loaded = await loadLlamaCpu({
        modelPath: args.model, threads, mmap: true, lazy: false, checkTensors: !args["no-check-tensors"],
        verbose: args.verbose,
    });
} catch (error) {
    finish(false, {stage: "load", error: error.message, llama_errors: error.llamaErrors ?? []});
}
const {llama, model, logs} = loaded;
const vocabSize = vocabularySize(model);
Object.assign(report, {
    arch: model.fileInfo.metadata?.general?.architecture ?? null,
    n_vocab: vocabSize,
    n_tensors: model.fileInfo.tensorCount !== undefined ? Number(model.fileInfo.tensorCount) : null,
    model_file_bytes: statSync(args.model).size,
    cpu_backend: logs.cpuBackend(),
    llama_cpp_release: llama.llamaCppRelease?.release ?? null,
});

function promptIds() {
    if (args["prompt-ids"]) {
        return args["prompt-ids"].split(",").map((part) => {
            const id = Number(part.trim());
            if (!Number.isInteger(id) || id < 0 || id >= vocabSize) {
                fail(`--prompt-ids: '${part}' is not an integer id in [0, ${vocabSize})`);
            }
            return id;
        });
    }
    if (model.vocabularyType === "none") return deterministicTokenIds(8, vocabSize, 1);
    const ids = Array.from(model.tokenize(args.text, false));
    if (ids.length === 0) fail(`--text '${args.text}' tokenizes to no ids`);
    return ids;
}

const maxPrompt = Math.max(16, ...(args.golden ? goldenCases().map((c) => c.prompt_ids.length + c.n_predict) : [0]));
let context;
try {
    context = await model.createContext({
        contextSize: maxPrompt + tokensToGenerate + 16,
        batchSize: maxPrompt,
        sequences: 1,
        threads: {ideal: threads, min: threads},
        flashAttention: false,
        ignoreMemorySafetyChecks: true,
    });
} catch (error) {
    finish(false, {stage: "context", error: error.message});
}
const sequence = context.getSequence();
const confidenceNext = {generateNext: {...greedyNext.generateNext, confidence: true}};

// Greedy continuation of `prompt`: prompt as one batch, then one token per evaluation, as the golden fixtures did.
async function generate(prompt, count) {
    await sequence.clearHistory();
    const ids = [];
    const confidences = [];
    let input = prompt.map((id, index) => (index === prompt.length - 1 ? [id, confidenceNext] : id));
    for (let step = 0; step < count; step++) {
        const output = await sequence.controlledEvaluate(input);
        const next = output[input.length - 1]?.next;
        if (next?.token == null) throw new Error(`no token generated at step ${step}`);
        ids.push(next.token);
        confidences.push(next.confidence);
        input = [[next.token, confidenceNext]];
    }
    return {ids, confidences};
}

function goldenCases() {
    let golden;
    try {
        golden = JSON.parse(readFileSync(args.golden, "utf8"));
    } catch (error) {
        fail(`cannot read golden file '${args.golden}': ${error.message}`);
    }
    if (!Array.isArray(golden.generation)) fail(`golden file '${args.golden}' has no "generation" array`);
    return golden.generation;
}

try {
    const prompt = promptIds();
    const {ids, confidences} = await generate(prompt, tokensToGenerate);
    const badProbability = confidences.findIndex((p) => !Number.isFinite(p) || p <= 0 || p > 1);
    Object.assign(report, {
        prompt_ids: prompt,
        generated_ids: ids,
        generated_text: model.vocabularyType === "none" ? null : model.detokenize(ids),
        probabilities: confidences.map((p) => Number(p.toPrecision(4))),
    });
    if (badProbability >= 0) {
        const error = `generated token ${badProbability} has probability ${confidences[badProbability]}`;
        finish(false, {stage: "generate", error});
    }

    if (args.golden) {
        const cases = [];
        for (const golden of goldenCases()) {
            const {ids: replayed} = await generate(golden.prompt_ids, golden.n_predict);
            const firstDifference = replayed.findIndex((id, i) => id !== golden.generated_ids[i]);
            cases.push({name: golden.name, n_predict: golden.n_predict, first_difference: firstDifference});
        }
        // A difference is reported, not failed: on quantized models llama.cpp's own CPU paths may disagree after a
        // near-tie (see the golden README); on the same prebuilt library and CPU variant they should match exactly.
        report.golden_cases = cases;
        report.golden_all_match = cases.every((c) => c.first_difference === -1);
    }
} catch (error) {
    finish(false, {stage: "generate", error: error.message});
}

await context.dispose();
await model.dispose();
await llama.dispose();
finish(true);
