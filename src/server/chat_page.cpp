#include "server/chat_page.h"

namespace df::server {
namespace {

// Kept small and dependency-free on purpose: plain DOM, fetch() and a canvas.
constexpr std::string_view kPage = R"HTML(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>diskformer</title>
<style>
  body { font-family: system-ui, sans-serif; margin: 0; display: flex; height: 100vh; background: #f6f6f4; color: #222; }
  main { flex: 1; display: flex; flex-direction: column; padding: 16px; min-width: 0; }
  #log { flex: 1; overflow-y: auto; }
  .msg { margin: 8px 0; padding: 10px 12px; border-radius: 8px; white-space: pre-wrap; }
  .user { background: #dde8f6; }
  .assistant { background: #fff; border: 1px solid #ddd; }
  .thinking { color: #777; font-style: italic; border-left: 3px solid #ccc; padding-left: 8px; margin-bottom: 6px; }
  form { display: flex; gap: 8px; margin-top: 8px; }
  textarea { flex: 1; height: 60px; font: inherit; padding: 8px; }
  button { padding: 0 20px; font: inherit; }
  aside { width: 280px; padding: 16px; background: #fff; border-left: 1px solid #ddd; font-size: 14px; }
  aside dt { color: #666; margin-top: 8px; }
  aside dd { margin: 0; font-size: 20px; font-variant-numeric: tabular-nums; }
</style>
</head>
<body>
<main>
  <h2 style="margin:0 0 8px">diskformer</h2>
  <div id="log"></div>
  <form id="form"><textarea id="input" placeholder="Say something"></textarea><button id="send">Send</button></form>
</main>
<aside id="stats">
  <h3 style="margin-top:0">Engine</h3>
  <dl>
    <dt>tokens/s (recent)</dt><dd id="tps">-</dd>
    <dt>tokens generated</dt><dd id="ntok">-</dd>
    <dt>expert cache hit rate</dt><dd id="hit">-</dd>
    <dt>I/O wait share</dt><dd id="iowait">-</dd>
    <dt>expert bytes per token</dt><dd id="bpt">-</dd>
    <dt>hit rate per MoE layer</dt>
  </dl>
  <canvas id="chart" width="248" height="120"></canvas>
</aside>
<script>
const messages = [];
const log = document.getElementById('log');
function add(role) {
  const div = document.createElement('div');
  div.className = 'msg ' + role;
  const think = document.createElement('div');
  think.className = 'thinking';
  think.style.display = 'none';
  const text = document.createElement('div');
  div.append(think, text);
  log.append(div);
  return { think, text };
}
async function send(content) {
  messages.push({ role: 'user', content });
  add('user').text.textContent = content;
  const out = add('assistant');
  let answer = '', reasoning = '';
  const res = await fetch('/v1/chat/completions', {
    method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ messages, stream: true, max_tokens: 512 }) });
  if (!res.ok) { out.text.textContent = 'error: ' + (await res.text()); return; }
  const reader = res.body.getReader(), dec = new TextDecoder();
  let buf = '';
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    buf += dec.decode(value, { stream: true });
    let at;
    while ((at = buf.indexOf('\n\n')) >= 0) {
      const ev = buf.slice(0, at); buf = buf.slice(at + 2);
      if (!ev.startsWith('data: ')) continue;
      const data = ev.slice(6);
      if (data === '[DONE]') continue;
      const j = JSON.parse(data);
      if (j.error) { out.text.textContent += '\n[error: ' + j.error.message + ']'; continue; }
      const d = (j.choices && j.choices[0] && j.choices[0].delta) || {};
      if (d.reasoning_content) { reasoning += d.reasoning_content; out.think.style.display = ''; out.think.textContent = reasoning; }
      if (d.content) { answer += d.content; out.text.textContent = answer; }
      log.scrollTop = log.scrollHeight;
    }
  }
  messages.push({ role: 'assistant', content: answer });
  out.text.dataset.done = '1';
}
document.getElementById('form').addEventListener('submit', (e) => {
  e.preventDefault();
  const input = document.getElementById('input');
  const text = input.value.trim();
  if (text) { input.value = ''; send(text); }
});
function pct(x) { return (100 * x).toFixed(1) + ' %'; }
function draw(rates) {
  const c = document.getElementById('chart'), g = c.getContext('2d');
  g.fillStyle = '#fafafa'; g.fillRect(0, 0, c.width, c.height);
  if (!rates || !rates.length) return;
  const w = c.width / rates.length;
  rates.forEach((r, i) => { g.fillStyle = '#4a7bd0'; const h = r * (c.height - 4); g.fillRect(i * w + 1, c.height - h, Math.max(w - 2, 1), h); });
}
async function poll() {
  try {
    const p = await (await fetch('/props')).json();
    const s = p.stats;
    document.getElementById('tps').textContent = s.recent_tokens_per_second.toFixed(1);
    document.getElementById('ntok').textContent = s.tokens_generated;
    const c = s.expert_cache;
    if (c) {
      document.getElementById('hit').textContent = pct(c.hit_rate);
      document.getElementById('iowait').textContent = pct(c.io_wait_share);
      document.getElementById('bpt').textContent = (c.bytes_per_token / 1048576).toFixed(2) + ' MiB';
      draw(c.layer_hit_rate);
    } else {
      document.getElementById('hit').textContent = 'resident';
      document.getElementById('iowait').textContent = '0 %';
      document.getElementById('bpt').textContent = '0';
    }
    document.getElementById('stats').dataset.filled = '1';
  } catch (e) {}
}
poll();
setInterval(poll, 1000);
// /?q=TEXT sends TEXT on load (a link that opens a conversation; the browser test uses it).
const q = new URLSearchParams(location.search).get('q');
if (q) send(q);
</script>
</body>
</html>
)HTML";

}  // namespace

std::string_view chat_page_html() { return kPage; }

}  // namespace df::server
