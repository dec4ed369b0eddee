// `diskformer serve` through real clients on loopback: the official `openai` npm package (chat whole and
// streamed, completions, models) and curl. Usage: node openai_client.test.mjs DISKFORMER MODEL.gguf SCRATCH
// Exits 77 (ctest's skip) when the openai package is not installed (scripts/install-deps.sh installs it).
import { spawn, execFileSync } from 'node:child_process';
import assert from 'node:assert/strict';

let OpenAI;
try {
  ({ default: OpenAI } = await import('openai'));
} catch {
  console.log('SKIP: the openai npm package is not installed (run scripts/install-deps.sh, or npm ci in tests/node)');
  process.exit(77);
}

const [binary, model, scratch] = process.argv.slice(2);
const server = spawn(binary, ['serve', '-m', model, '--port', '0', '-np', '2', '-c', '512', '-t', '1',
                              '--api-key', 'test-key', '--alias', 'tiny'],
                     { env: { ...process.env, XDG_CACHE_HOME: `${scratch}/xdg-cache` }, stdio: ['ignore', 'inherit', 'pipe'] });
let stderr = '';
const port = await new Promise((resolve, reject) => {
  server.stderr.on('data', (d) => {
    stderr += d;
    const m = stderr.match(/listening on http:\/\/127\.0\.0\.1:(\d+)/);
    if (m && stderr.includes('ready:')) resolve(Number(m[1]));
  });
  server.on('exit', (code) => reject(new Error(`serve exited with ${code}:\n${stderr}`)));
});

let failed = false;
async function check(name, fn) {
  try {
    await fn();
    console.log(`ok - ${name}`);
  } catch (e) {
    failed = true;
    console.log(`not ok - ${name}\n${e.stack}`);
  }
}

const base = `http://127.0.0.1:${port}/v1`;
const client = new OpenAI({ apiKey: 'test-key', baseURL: base, maxRetries: 0, timeout: 60000 });
const messages = [{ role: 'user', content: 'Tell me a story about a disk' }];

await check('models lists the served model', async () => {
  const list = await client.models.list();
  assert.deepEqual(list.data.map((m) => m.id), ['tiny']);
});

let whole;
await check('chat completion, whole', async () => {
  whole = await client.chat.completions.create({ model: 'tiny', messages, max_tokens: 16, temperature: 0 });
  assert.equal(whole.object, 'chat.completion');
  assert.equal(whole.choices[0].message.role, 'assistant');
  assert.equal(typeof whole.choices[0].message.content, 'string');
  assert.ok(['stop', 'length'].includes(whole.choices[0].finish_reason));
  assert.ok(whole.usage.completion_tokens > 0 && whole.usage.completion_tokens <= 16);
});

await check('chat completion, streamed, equals the whole answer', async () => {
  const stream = await client.chat.completions.create({
    model: 'tiny', messages, max_tokens: 16, temperature: 0, stream: true, stream_options: { include_usage: true } });
  let text = '', finish = null, usage = null, chunks = 0;
  for await (const chunk of stream) {
    chunks++;
    if (chunk.usage) usage = chunk.usage;
    const choice = chunk.choices[0];
    if (!choice) continue;
    text += choice.delta.content ?? '';
    if (choice.finish_reason) finish = choice.finish_reason;
  }
  assert.ok(chunks >= 2);
  assert.equal(text, whole.choices[0].message.content);
  assert.equal(finish, whole.choices[0].finish_reason);
  assert.equal(usage.completion_tokens, whole.usage.completion_tokens);
});

await check('completions, text prompt', async () => {
  const c = await client.completions.create({ model: 'tiny', prompt: 'Once upon a time', max_tokens: 8, temperature: 0 });
  assert.equal(c.object, 'text_completion');
  assert.equal(typeof c.choices[0].text, 'string');
  assert.ok(c.usage.completion_tokens > 0);
});

await check('a wrong key is refused with 401', async () => {
  const bad = new OpenAI({ apiKey: 'nope', baseURL: base, maxRetries: 0 });
  await assert.rejects(bad.models.list(), (e) => e.status === 401);
});

await check('a bad request is a 400 with the error message', async () => {
  await assert.rejects(client.chat.completions.create({ model: 'tiny', messages: [{ role: 'wizard', content: 'x' }] }),
                       (e) => e.status === 400 && /wizard/.test(e.message));
});

await check('curl: chat completion and streamed [DONE]', async () => {
  const body = JSON.stringify({ messages, max_tokens: 16, temperature: 0 });
  const out = execFileSync('curl', ['-sS', '-H', 'Authorization: Bearer test-key', '-H', 'Content-Type: application/json',
                                    '-d', body, `${base}/chat/completions`]).toString();
  assert.equal(JSON.parse(out).choices[0].message.content, whole.choices[0].message.content);
  const sse = execFileSync('curl', ['-sSN', '-H', 'Authorization: Bearer test-key', '-d',
                                    JSON.stringify({ messages, max_tokens: 4, stream: true }), `${base}/chat/completions`]).toString();
  assert.ok(sse.trimEnd().endsWith('data: [DONE]'), sse);
  const health = execFileSync('curl', ['-sS', `http://127.0.0.1:${port}/health`]).toString();
  assert.equal(JSON.parse(health).status, 'ok');
});

server.kill('SIGTERM');
const code = await new Promise((resolve) => server.on('exit', (c) => resolve(c)));
await check('serve exits cleanly on SIGTERM', async () => assert.equal(code, 0));
process.exit(failed ? 1 : 0);
