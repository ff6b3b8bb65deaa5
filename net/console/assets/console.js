// calserve web console: a chat playground over /v1/ws and a live view of the
// engine polled from /v1/console/state (docs/console.md).
// Everything shown comes from the server, model output above all, and is
// untrusted: it goes into the page as text (textContent / createElement), never
// as markup. The API key stays in this tab's sessionStorage and is sent as a
// Bearer header (fetch) or as the WebSocket subprotocol calserve.key.<hex>.
'use strict';

const $ = (id) => document.getElementById(id);
const state = { key: sessionStorage.getItem('calserve.key') || '', ws: null, wsReady: null,
                next: 1, history: [], running: null, lastJob: 0, jobs: [], timer: null };
const k_window_ms = 2000;   // the slot timeline shows the last two seconds
const k_jobs_kept = 400;    // jobs kept for the timeline
const k_poll_ms = 500;

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = String(text);
  return e;
}

function setStatus(text) { $('status').textContent = text || ''; }

function headers() {
  const h = { 'Content-Type': 'application/json' };
  if (state.key) h.Authorization = 'Bearer ' + state.key;
  return h;
}

async function api(path) {
  const res = await fetch(path, { headers: headers(), cache: 'no-store' });
  const body = await res.json().catch(() => ({}));
  if (!res.ok) throw new Error((body.error && body.error.message) || ('HTTP ' + res.status));
  return body;
}

// ---- API key ---------------------------------------------------------------

function hexOf(text) {
  return Array.from(new TextEncoder().encode(text), (b) => b.toString(16).padStart(2, '0')).join('');
}

function useKey(key) {
  state.key = key;
  sessionStorage.setItem('calserve.key', key);
  if (state.ws) state.ws.close();
  state.ws = null;
  loadModels();
}

// ---- chat ------------------------------------------------------------------

async function loadModels() {
  const select = $('model');
  try {
    const list = await api('/v1/models');
    select.replaceChildren(...list.data.map((m) => {
      const o = el('option', '', m.id);
      o.value = m.id;
      return o;
    }));
    setStatus('');
  } catch (e) {
    setStatus('models: ' + e.message + (state.key ? '' : ' (an API key may be needed)'));
  }
}

function connect() {
  if (state.ws && state.ws.readyState <= WebSocket.OPEN) return state.wsReady;
  const url = (location.protocol === 'https:' ? 'wss://' : 'ws://') + location.host + '/v1/ws';
  const protocols = ['calserve'];
  if (state.key) protocols.push('calserve.key.' + hexOf(state.key));
  const ws = new WebSocket(url, protocols);
  state.ws = ws;
  state.wsReady = new Promise((resolve, reject) => {
    ws.onopen = () => resolve(ws);
    ws.onerror = () => reject(new Error('WebSocket refused (wrong API key?)'));
  });
  ws.onmessage = (ev) => onEvent(JSON.parse(ev.data));
  ws.onclose = () => {
    if (state.ws === ws) state.ws = null;
    if (state.running) finish(state.running, null, 'connection closed');
  };
  return state.wsReady;
}

function numberParam(id, body, name) {
  const v = $(id).value.trim();
  if (v !== '') body[name || id] = Number(v);
}

function requestBody(messages) {
  const body = { type: 'generate', model: $('model').value, messages };
  for (const id of ['temperature', 'top_p', 'top_k', 'min_p', 'max_tokens', 'seed',
                    'presence_penalty', 'frequency_penalty', 'repetition_penalty']) numberParam(id, body);
  if ($('ignore_eos').checked) body.ignore_eos = true;
  const stop = $('stop').value.split('\n').filter((s) => s !== '');
  if (stop.length) body.stop = stop;
  const bias = $('logit_bias').value.trim();
  if (bias) body.logit_bias = JSON.parse(bias);
  return body;
}

function addMessage(role, text) {
  const m = el('div', 'msg ' + role);
  m.append(el('div', 'who', role));
  const reasoning = el('details', 'reasoning');
  reasoning.hidden = true;
  reasoning.open = true;
  reasoning.append(el('summary', '', 'reasoning'), el('div', 'reasoning-text'));
  m.append(reasoning, el('div', 'text', text), el('div', 'stats'));
  $('transcript').append(m);
  m.scrollIntoView({ block: 'end' });
  return m;
}

// Qwen3-style reasoning: the text up to "</think>" (after an optional "<think>")
// is reasoning, the rest (leading newlines dropped) the answer.
function splitReasoning(raw) {
  const open = raw.match(/^\s*<think>/);
  const body = open ? raw.slice(open[0].length) : raw;
  const close = body.indexOf('</think>');
  if (close < 0) return open ? { reasoning: body, answer: '' } : { reasoning: '', answer: raw };
  return { reasoning: body.slice(0, close), answer: body.slice(close + 8).replace(/^\n+/, '') };
}

function render(run) {
  const parts = splitReasoning(run.raw);
  const r = run.node.querySelector('.reasoning');
  r.hidden = parts.reasoning === '';
  r.querySelector('.reasoning-text').textContent = parts.reasoning;
  run.node.querySelector('.text').textContent = parts.answer;
}

async function send(ev) {
  ev.preventDefault();
  const text = $('prompt').value;
  if (!text.trim() || state.running) return;
  const messages = [];
  const system = $('system').value;
  if (system.trim()) messages.push({ role: 'system', content: system });
  messages.push(...state.history, { role: 'user', content: text });
  let body;
  try {
    body = requestBody(messages);
  } catch (e) {
    setStatus('logit_bias: ' + e.message);
    return;
  }
  addMessage('user', text);
  $('prompt').value = '';
  const id = 'c' + state.next++;
  const run = { id, raw: '', tokens: 0, sent: performance.now(), first: 0, last: 0,
                node: addMessage('assistant', ''), userText: text };
  run.node.dataset.state = 'running';
  state.running = run;
  $('send').disabled = true;
  $('cancel').disabled = false;
  try {
    const ws = await connect();
    body.id = id;
    ws.send(JSON.stringify(body));
  } catch (e) {
    finish(run, null, e.message);
  }
}

function onEvent(msg) {
  const run = state.running;
  if (!run || msg.id !== run.id) return;
  if (msg.type === 'started') {
    run.requestId = msg.request_id;
  } else if (msg.type === 'delta') {
    const now = performance.now();
    if (msg.token !== undefined) {
      if (!run.first) run.first = now;
      run.last = now;
      run.tokens++;
    }
    run.raw += msg.text;
    render(run);
  } else if (msg.type === 'done') {
    finish(run, msg, null);
  } else if (msg.type === 'error') {
    finish(run, null, (msg.error && msg.error.message) || 'error');
  }
}

function finish(run, done, error) {
  if (state.running !== run) return;
  state.running = null;
  $('send').disabled = false;
  $('cancel').disabled = true;
  render(run);
  const stats = run.node.querySelector('.stats');
  run.node.dataset.state = error ? 'error' : done.finish_reason;
  if (error) {
    stats.classList.add('error');
    stats.textContent = error;
    setStatus(error);
    return;
  }
  const u = done.usage || {};
  const ttft = run.first ? run.first - run.sent : NaN;
  const tpot = run.tokens > 1 ? (run.last - run.first) / (run.tokens - 1) : NaN;
  const fmt = (ms) => (Number.isFinite(ms) ? ms.toFixed(1) + ' ms' : '-');
  stats.textContent = `${done.finish_reason} · prompt ${u.prompt_tokens} · completion ${u.completion_tokens} tokens` +
                      ` · TTFT ${fmt(ttft)} · TPOT ${fmt(tpot)}`;
  run.node.dataset.completionTokens = String(u.completion_tokens);
  state.history.push({ role: 'user', content: run.userText }, { role: 'assistant', content: splitReasoning(run.raw).answer });
}

function cancel() {
  if (state.running && state.ws) state.ws.send(JSON.stringify({ type: 'cancel', id: state.running.id }));
}

// ---- engine view -----------------------------------------------------------

const ms = (s) => (s === null || s === undefined ? '-' : (s * 1000).toFixed(1));

function setText(id, text, cls) {
  const e = $(id);
  e.textContent = text;
  if (cls !== undefined) e.className = cls;
}

function showLatency(lat) {
  const rows = [['TTFT (ms)', lat.ttft_s], ['TPOT (ms)', lat.tpot_s]].map(([name, p]) => {
    const tr = el('tr');
    for (const v of [name, ms(p.p50), ms(p.p90), ms(p.p99), p.count]) tr.append(el('td', '', v));
    return tr;
  });
  $('latency').tBodies[0].replaceChildren(...rows);
}

function showTimeline(s) {
  for (const j of s.jobs) state.jobs.push(j);
  if (state.jobs.length > k_jobs_kept) state.jobs.splice(0, state.jobs.length - k_jobs_kept);
  const start = s.now_ms - k_window_ms;
  const lanes = { ping: [], pong: [] };
  for (const j of state.jobs) {
    if (j.end_ms < start) continue;
    const left = Math.max(0, j.start_ms - start);
    const bar = el('div', `job ${j.kind} ${j.outcome}`);
    bar.style.left = (100 * left / k_window_ms) + '%';
    bar.style.width = (100 * Math.max(0, j.end_ms - start - left) / k_window_ms) + '%';
    const span = Math.max(1e-6, j.end_ms - j.start_ms);
    const dev = el('div', 'dev');
    const devEnd = j.device_done_ms === null ? j.end_ms : j.device_done_ms;
    dev.style.width = (100 * Math.min(1, (devEnd - j.start_ms) / span)) + '%';
    bar.append(dev);
    bar.title = `${j.kind} #${j.seq}: ${j.rows} row(s), profile ${j.profile}, ${j.tokens} token(s), ` +
                `${(j.end_ms - j.start_ms).toFixed(2)} ms, ${j.outcome}`;
    lanes[j.slot].push(bar);
  }
  $('lane-ping').replaceChildren(...lanes.ping);
  $('lane-pong').replaceChildren(...lanes.pong);
  for (const slot of s.slots) {
    const b = $('slot-' + slot.name + '-state');
    b.textContent = slot.state;
    b.dataset.busy = String(slot.state !== 'free');
  }
  $('axis-left').textContent = '-' + (k_window_ms / 1000) + ' s';
  const recent = state.jobs.filter((j) => j.end_ms >= start);
  setText('job-detail', `${recent.length} job(s) in the window; ${s.last_job} since start`);
}

function showDevice(s) {
  const d = s.device;
  setText('device-state', d.state, 'big ' + d.state);
  $('device-state').dataset.ready = String(d.ready);
  setText('device-detail', `${s.model} (${s.backend}) · ${d.healthy ? 'healthy' : 'unhealthy'} · resets ${d.resets}`);
  const fires = Object.entries(d.fault_fires).map(([p, n]) => `${p} ×${n}`).join(', ');
  setText('faults', fires ? 'fault fires: ' + fires : 'no faults fired');
  const rows = d.transitions.slice().reverse().map((t) => {
    const tr = el('tr');
    for (const v of [((t.at_ms - s.now_ms) / 1000).toFixed(1) + ' s', t.from, t.to, t.note]) tr.append(el('td', '', v));
    return tr;
  });
  $('transitions').tBodies[0].replaceChildren(...rows);
}

function showState(s) {
  showDevice(s);
  const r = s.requests;
  setText('requests', `${r.running} running · ${r.waiting} waiting`);
  setText('requests-detail', `in flight ${r.in_flight}` +
          (r.preemptions !== undefined ? ` · preempted ${r.preemptions} · recovered ${r.recovered}` : ''));
  if (s.kv) {
    setText('kv', `${s.kv.blocks_used} / ${s.kv.blocks_total}`);
    $('kv-bar').style.width = (s.kv.blocks_total ? 100 * s.kv.blocks_used / s.kv.blocks_total : 0) + '%';
  }
  if (s.prefix_cache) {
    const c = s.prefix_cache;
    setText('cache', c.hit_rate === null ? '-' : `${(100 * c.hit_rate).toFixed(1)} %`);
    setText('cache-detail', `${c.hit_tokens} of ${c.queried_tokens} prompt tokens from cache · ` +
            `${c.blocks} blocks cached · ${c.evictions} evictions`);
  }
  if (s.speculative) {
    const v = s.speculative;
    setText('spec', v.acceptance_rate === null ? '-' : `${(100 * v.acceptance_rate).toFixed(1)} %`);
    setText('spec-detail', `${v.accepted_tokens} of ${v.drafted_tokens} drafted tokens accepted · ` +
            `${v.verify_rows} verify rows`);
  }
  if (s.batch) {
    const mean = s.batch.mean_rows === null ? '-' : s.batch.mean_rows.toFixed(2);
    setText('batch', `${mean} rows`);
    setText('batch-detail', `${s.batch.decode_jobs} decode jobs · ${s.batch.padding_rows} padding rows` +
            (s.tokens ? ` · tokens ${s.tokens.prompt} in / ${s.tokens.generated} out` : ''));
  }
  if (s.latency) showLatency(s.latency);
  showTimeline(s);
}

async function poll() {
  try {
    const s = await api('/v1/console/state?since=' + state.lastJob);
    state.lastJob = s.last_job;
    showState(s);
    setStatus('');
  } catch (e) {
    setStatus('engine: ' + e.message);
  }
}

function showView(name) {
  for (const v of ['chat', 'engine']) {
    $('view-' + v).hidden = v !== name;
    $('tab-' + v).classList.toggle('active', v === name);
  }
  clearInterval(state.timer);
  state.timer = null;
  if (name === 'engine') {
    poll();
    state.timer = setInterval(poll, k_poll_ms);
  }
}

// ---- wiring ----------------------------------------------------------------

document.addEventListener('DOMContentLoaded', () => {
  $('key').value = state.key;
  $('key-form').addEventListener('submit', (ev) => { ev.preventDefault(); useKey($('key').value); });
  $('compose').addEventListener('submit', send);
  $('prompt').addEventListener('keydown', (ev) => {
    if (ev.key === 'Enter' && (ev.ctrlKey || ev.metaKey)) send(ev);
  });
  $('cancel').addEventListener('click', cancel);
  $('clear').addEventListener('click', () => { state.history = []; $('transcript').replaceChildren(); });
  $('tab-chat').addEventListener('click', () => showView('chat'));
  $('tab-engine').addEventListener('click', () => showView('engine'));
  const view = location.hash === '#engine' ? 'engine' : 'chat';
  showView(view);
  loadModels();
});
