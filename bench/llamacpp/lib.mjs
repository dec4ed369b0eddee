// Shared helpers for the llama.cpp reference scripts: loading a GGUF on llama.cpp's CPU backend the same way the
// golden fixtures were produced (prebuilt node-llama-cpp 3.21.1, no GPU, flash attention off), and deterministic
// prompts given as token ids so that no tokenizer enters a speed measurement.
import {readFileSync, statSync} from "node:fs";
import path from "node:path";
import {parseArgs} from "node:util";
import {getLlama} from "node-llama-cpp";

export function nodeLlamaCppVersion() {
    // The package's "exports" map hides package.json from import/require, so it is read as a plain file.
    const file = new URL("./node_modules/node-llama-cpp/package.json", import.meta.url);
    return JSON.parse(readFileSync(file, "utf8")).version;
}

export function fail(message) {
    process.stderr.write(`error: ${message}\n`);
    process.exit(2);
}

// Options parsed strictly (an unknown or malformed option is a usage error with exit code 2, not a stack trace).
export function parseCommandLine(options, usage) {
    let values;
    try {
        ({values} = parseArgs({options: {...options, help: {type: "boolean", default: false}}, strict: true}));
    } catch (error) {
        fail(`${error.message}\n${usage}`);
    }
    if (values.help) {
        console.log(usage);
        process.exit(0);
    }
    if (!values.model) fail(`--model is required\n${usage}`);
    return values;
}

export function positiveInt(name, text) {
    const value = Number(text);
    if (!Number.isInteger(value) || value < 1) fail(`--${name} must be a positive integer, got '${text}'`);
    return value;
}

export function nonNegativeInt(name, text) {
    const value = Number(text);
    if (!Number.isInteger(value) || value < 0) fail(`--${name} must be a non-negative integer, got '${text}'`);
    return value;
}

// llama.cpp's log lines tell facts that the API does not expose (which CPU kernel library ggml picked, how much of the
// model was copied into repacked buffers instead of staying mmapped); they are kept, and shown only on --verbose.
export class LogCollector {
    constructor(verbose) {
        this.verbose = verbose;
        this.lines = [];
        this.errors = [];
    }

    log(level, message) {
        this.lines.push(message);
        if (level === "error" || level === "fatal") this.errors.push(message);
        if (this.verbose || level === "error" || level === "fatal") {
            process.stderr.write(`[llama.cpp ${level}] ${message}\n`);
        }
    }

    cpuBackend() {
        for (const line of this.lines) {
            const match = /loaded CPU backend from (\S+)/.exec(line);
            if (match) return path.basename(match[1]);
        }
        return null;
    }

    // "load_tensors:   CPU_REPACK model buffer size =     4.57 MiB" -> {CPU_REPACK: 4.57, CPU_Mapped: ...}
    modelBuffersMiB() {
        const buffers = {};
        for (const line of this.lines) {
            const match = /load_tensors:\s+(\S+) model buffer size =\s+([\d.]+) MiB/.exec(line);
            if (match) buffers[match[1]] = Number(match[2]);
        }
        return buffers;
    }
}

// On a load failure the thrown error carries `llamaErrors`: llama.cpp's own error lines say what was wrong with
// the file.
export async function loadLlamaCpu({modelPath, threads, mmap, lazy, checkTensors, verbose}) {
    try {
        statSync(modelPath);
    } catch {
        fail(`model file '${modelPath}' does not exist or cannot be read`);
    }
    const logs = new LogCollector(verbose);
    const llama = await getLlama({
        gpu: false,
        // Only the prebuilt binaries count as the reference; a local rebuild would be a different llama.cpp.
        build: "never",
        maxThreads: threads,
        logLevel: "debug",
        logger: (level, message) => logs.log(level, message.trimEnd()),
        progressLogs: false,
    });
    const loadStart = performance.now();
    let model;
    try {
        model = await llama.loadModel({
            modelPath,
            gpuLayers: 0,
            useMmap: mmap,
            lazyMode: lazy,
            checkTensors,
            // The interesting case for diskformer is a model larger than RAM, which node-llama-cpp would refuse.
            ignoreMemorySafetyChecks: true,
        });
    } catch (error) {
        error.llamaErrors = logs.errors;
        throw error;
    }
    const loadSeconds = (performance.now() - loadStart) / 1000;
    return {llama, model, logs, loadSeconds};
}

export function vocabularySize(model) {
    const embedding = (model.fileInfo.fullTensorInfo ?? model.fileInfo.tensorInfo ?? []).find(
        (tensor) => tensor.name === "token_embd.weight");
    if (embedding && embedding.dimensions.length === 2) return Number(embedding.dimensions[1]);
    const tokens = model.fileInfo.metadata?.tokenizer?.ggml?.tokens;
    if (Array.isArray(tokens) && tokens.length > 0) return tokens.length;
    const fromArchitecture = model.fileInfo.architectureMetadata?.vocab_size;
    if (Number.isInteger(fromArchitecture) && fromArchitecture > 0) return fromArchitecture;
    fail(`cannot tell the vocabulary size of '${model.filename}' ` +
        "(no token_embd.weight, tokenizer.ggml.tokens or <arch>.vocab_size)");
}

// xorshift32: the same seed gives the same ids on every machine and Node version, unlike Math.random.
export function deterministicTokenIds(count, vocabSize, seed) {
    let state = (seed >>> 0) || 0x9e3779b9;
    const ids = [];
    for (let i = 0; i < count; i++) {
        state ^= state << 13;
        state >>>= 0;
        state ^= state >>> 17;
        state ^= state << 5;
        state >>>= 0;
        ids.push(state % vocabSize);
    }
    return ids;
}

// Accepts a JSON array of ids or ids separated by whitespace and/or commas.
export function readTokenIdsFile(file, vocabSize) {
    let text;
    try {
        text = readFileSync(file, "utf8").trim();
    } catch (error) {
        fail(`cannot read token id file '${file}': ${error.message}`);
    }
    const parts = text.startsWith("[") ? JSON.parse(text) : text.split(/[\s,]+/).filter((part) => part.length > 0);
    return parts.map((part, index) => {
        const id = Number(part);
        if (!Number.isInteger(id) || id < 0 || id >= vocabSize) {
            fail(`token id file '${file}': entry ${index} is '${part}', not an integer in [0, ${vocabSize})`);
        }
        return id;
    });
}

export function median(values) {
    const sorted = [...values].sort((a, b) => a - b);
    const middle = Math.floor(sorted.length / 2);
    return sorted.length % 2 === 1 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2;
}

export function round(value, digits = 3) {
    const scale = 10 ** digits;
    return Math.round(value * scale) / scale;
}

// Greedy next-token request for controlledEvaluate: temperature 0 is argmax of the raw logits in node-llama-cpp.
export const greedyNext = {generateNext: {token: true, options: {temperature: 0}}};
