// The LDP inspector's page: plain ES module, no framework, no build step. Everything it shows comes from the
// inspector's JSON API (/api/...), which talks to the delegate; this file only renders and collects input.

const $ = (id) => document.getElementById(id);

const state = {
  connection: null, // the API's connection id
  view: null, // the card, laid out by the API
  task: null, // the running or last task's id
  source: null, // the EventSource of the running task
  wireSeq: 0, // the next wire entry to ask for
  wire: [], // every wire entry received
  lastChainTask: null,
};

// ---------------------------------------------------------------------------------------------------------------
// Small helpers

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (key === 'class') node.className = value;
    else if (key === 'text') node.textContent = value;
    else node.setAttribute(key, value === true ? '' : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

// replaceChildren without the nulls a conditional child leaves (the DOM would write them as the text "null").
function replace(node, ...children) {
  node.replaceChildren(...children.flat().filter((c) => c !== null && c !== undefined));
}

function pretty(value) {
  if (typeof value === 'string') return value;
  return JSON.stringify(value, null, 2);
}

function showError(message) {
  const box = $('error');
  box.textContent = message;
  box.hidden = !message;
}

function setStatus(message) {
  $('status').textContent = message;
}

// Every API call: JSON in, JSON out, a typed error message on failure, a timeout so nothing waits forever.
async function api(path, body, timeoutMs = 60000) {
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(), timeoutMs);
  const init = { signal: controller.signal, headers: {} };
  if (body !== undefined) {
    init.method = 'POST';
    init.headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(path, init);
  } catch (e) {
    throw new Error(e.name === 'AbortError'
      ? `the inspector did not answer within ${Math.round(timeoutMs / 1000)} s`
      : `the inspector is not reachable (${e.message}); is ldp inspect still running?`);
  } finally {
    clearTimeout(timer);
  }
  const text = await response.text();
  let data;
  try {
    data = text ? JSON.parse(text) : {};
  } catch {
    throw new Error(`the inspector answered ${response.status} with something that is not JSON`);
  }
  if (!response.ok) throw new Error(data.error || `the inspector answered ${response.status}`);
  return data;
}

async function copy(text, button) {
  try {
    await navigator.clipboard.writeText(text);
    button.textContent = 'Copied';
  } catch {
    // Clipboard access needs focus and permission; selecting the text lets the user copy it by hand.
    button.textContent = 'Select and copy (Ctrl+C)';
  }
  setTimeout(() => { button.textContent = button.dataset.label || 'Copy'; }, 1500);
}

// ---------------------------------------------------------------------------------------------------------------
// Tabs: arrow keys move between them (WAI-ARIA tabs pattern), Enter or Space or a click selects.

const tabs = () => [...document.querySelectorAll('[role=tab]')];

function selectTab(tab) {
  for (const t of tabs()) {
    const selected = t === tab;
    t.setAttribute('aria-selected', String(selected));
    t.tabIndex = selected ? 0 : -1;
    $(t.getAttribute('aria-controls')).hidden = !selected;
  }
  if (tab.id === 'tab-wire') refreshWire();
  if (tab.id === 'tab-sessions') refreshSessions();
}

function setupTabs() {
  for (const tab of tabs()) {
    tab.addEventListener('click', () => selectTab(tab));
    tab.addEventListener('keydown', (event) => {
      const all = tabs();
      const index = all.indexOf(tab);
      let next = null;
      if (event.key === 'ArrowRight') next = all[(index + 1) % all.length];
      else if (event.key === 'ArrowLeft') next = all[(index - 1 + all.length) % all.length];
      else if (event.key === 'Home') next = all[0];
      else if (event.key === 'End') next = all[all.length - 1];
      if (next) {
        event.preventDefault();
        next.focus();
        selectTab(next);
      }
    });
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Connect and the card

async function connect(event) {
  event?.preventDefault();
  showError('');
  const url = $('url').value.trim();
  if (!url) {
    showError('Enter the delegate\'s URL, e.g. http://127.0.0.1:8090');
    $('url').focus();
    return;
  }
  const form = {
    url,
    token: $('token').value || null,
    sign: $('sign').value || null,
    secret: $('secret').value || null,
    trusted_issuers: $('issuers').value || null,
    trust_domain: $('trust-domain').value || null,
    timeout_secs: Number($('timeout').value) || null,
  };
  setStatus(`Connecting to ${url}…`);
  $('connect').disabled = true;
  const timeout = ((form.timeout_secs || 30) + 5) * 1000;
  try {
    const answer = await api('/api/connect', form, timeout);
    state.connection = answer.connection;
    state.view = answer.view;
    state.wireSeq = 0;
    state.wire = [];
    const card = answer.view.card;
    setStatus(`Connected to ${card.delegate_id} at ${answer.url}${answer.signed ? ` (messages signed ${answer.signed})` : ''}`);
    renderCard(answer.view, answer.manifest);
    fillCallForm(answer.view);
    $('wire').querySelector('tbody').replaceChildren();
    $('view-sessions').replaceChildren(el('p', { class: 'empty', text: 'No session yet: run a task.' }));
  } catch (e) {
    setStatus('');
    showError(`Cannot connect: ${e.message}`);
  } finally {
    $('connect').disabled = false;
  }
}

function renderCard(view, manifest) {
  const card = view.card;
  const section = $('view-card');
  const facts = el('dl', { class: 'facts' },
    el('dt', { text: 'Delegate' }), el('dd', { id: 'card-delegate', text: card.delegate_id }),
    el('dt', { text: 'Name' }), el('dd', { text: card.name }),
    el('dt', { text: 'Model' }), el('dd', { text: `${card.model_family} ${card.model_version}` }),
    el('dt', { text: 'Trust domain' }), el('dd', { id: 'card-domain', text: card.trust_domain?.name ?? '' }),
    el('dt', { text: 'Payload modes' }), el('dd', { id: 'card-modes', text: (card.supported_payload_modes || []).join(', ') }),
    el('dt', { text: 'Context window' }), el('dd', { text: String(card.context_window ?? '') }),
    el('dt', { text: 'Endpoint' }), el('dd', { text: card.endpoint ?? '' }),
  );
  const rows = view.skills.map((skill) => {
    const claim = skill.claim
      ? `${skill.claim.score ?? '–'} (${skill.claim.claim_type}${skill.claim.issuer_id ? `, ${skill.claim.issuer_id}` : ''})`
      : 'none';
    const attestations = skill.attestations.length
      ? el('ul', { class: 'attestations' }, skill.attestations.map((a) => el('li', { class: a.verified ? 'ok' : 'bad' },
        `${a.score ?? '–'} by ${a.issuer_id ?? '?'}: `, el('strong', { text: a.verdict }))))
      : 'none';
    const schemas = el('div', {},
      skill.input_schema ? el('details', {}, el('summary', { text: 'input schema' }), el('pre', { text: pretty(skill.input_schema) })) : 'input: any',
      skill.output_schema ? el('details', {}, el('summary', { text: 'output schema' }), el('pre', { text: pretty(skill.output_schema) })) : null);
    return el('tr', {},
      el('th', { scope: 'row', text: skill.name }),
      el('td', { text: skill.description ?? '' }),
      el('td', { text: claim }),
      el('td', {}, attestations),
      el('td', {}, schemas));
  });
  const table = el('table', { id: 'skills' },
    el('caption', { text: 'Skills: the quality each claims beside the attestations that back it' }),
    el('thead', {}, el('tr', {}, ['Skill', 'Description', 'Claimed quality', 'Attestations', 'Schemas'].map((h) => el('th', { scope: 'col', text: h })))),
    el('tbody', {}, rows));
  const stray = view.stray_attestations.length
    ? el('div', {}, el('h3', { text: 'Other attestations on the card' }),
      el('ul', {}, view.stray_attestations.map((a) => el('li', { class: 'bad' }, `${a.skill ?? '?'} by ${a.issuer_id ?? '?'}: ${a.verdict}`))))
    : null;
  replace(section,
    el('h2', { text: card.name || card.delegate_id }),
    facts,
    table,
    stray,
    el('details', {}, el('summary', { text: 'The card as JSON' }), el('pre', { id: 'card-json', text: pretty(card) }),
      el('button', { type: 'button', class: 'copy', 'data-copy': 'card-json', text: 'Copy card' })),
    manifest ? el('details', {}, el('summary', { text: 'Capability manifest' }), el('pre', { text: pretty(manifest) })) : null,
  );
}

// ---------------------------------------------------------------------------------------------------------------
// The call form, generated from the skill's input schema

function fillCallForm(view) {
  const skill = $('skill');
  skill.replaceChildren(...view.skills.map((s) => el('option', { value: s.name, text: s.name })));
  const mode = $('mode');
  mode.replaceChildren(el('option', { value: '', text: 'the delegate\'s choice' }),
    ...(view.card.supported_payload_modes || []).map((m) => el('option', { value: m, text: m })));
  $('session').replaceChildren(el('option', { value: 'new', text: 'a new session' }));
  renderSchemaFields();
}

function currentSkill() {
  return state.view?.skills.find((s) => s.name === $('skill').value) ?? null;
}

function fieldKind(schema) {
  if (!schema || typeof schema !== 'object') return 'json';
  if (Array.isArray(schema.enum)) return 'enum';
  const type = Array.isArray(schema.type) ? schema.type.find((t) => t !== 'null') : schema.type;
  if (type === 'string' || type === 'number' || type === 'integer' || type === 'boolean') return type;
  return 'json';
}

function fieldFor(name, schema, required, id) {
  const kind = fieldKind(schema);
  const label = el('label', { for: id }, name, required ? ' (required)' : '', schema?.description ? ` – ${schema.description}` : '');
  let input;
  if (kind === 'enum') {
    input = el('select', { id }, required ? null : el('option', { value: '', text: '(none)' }),
      schema.enum.map((v) => el('option', { value: JSON.stringify(v), text: String(v) })));
  } else if (kind === 'boolean') {
    input = el('input', { id, type: 'checkbox' });
  } else if (kind === 'number' || kind === 'integer') {
    input = el('input', { id, type: 'number', step: kind === 'integer' ? '1' : 'any' });
  } else if (kind === 'string') {
    input = schema?.maxLength && schema.maxLength <= 200
      ? el('input', { id, type: 'text' })
      : el('textarea', { id, rows: 2 });
  } else {
    input = el('textarea', { id, rows: 3, spellcheck: 'false', placeholder: 'JSON' });
  }
  input.dataset.kind = kind;
  input.dataset.name = name;
  if (required) input.setAttribute('aria-required', 'true');
  return el('div', { class: 'field' }, label, input);
}

function renderSchemaFields() {
  const box = $('schema-fields');
  const skill = currentSkill();
  const schema = skill?.input_schema;
  if (schema && fieldKind(schema) === 'json' && schema.type === 'object' && schema.properties) {
    const required = new Set(schema.required || []);
    box.replaceChildren(...Object.entries(schema.properties).map(([name, sub], i) =>
      fieldFor(name, sub, required.has(name), `field-${i}`)));
    box.dataset.shape = 'object';
  } else if (schema && fieldKind(schema) !== 'json') {
    box.replaceChildren(fieldFor('input', schema, true, 'field-0'));
    box.dataset.shape = 'value';
  } else {
    // No schema (or one the form cannot draw): the input is text, sent as JSON when it parses as JSON.
    const input = el('textarea', { id: 'field-0', rows: 3 });
    input.dataset.kind = 'text';
    input.dataset.name = 'input';
    box.replaceChildren(el('div', { class: 'field' },
      el('label', { for: 'field-0', text: 'Input (text, or JSON; the skill publishes no schema the form can draw)' }), input));
    box.dataset.shape = 'value';
  }
}

// Reads one generated field; throws a message naming the field when its value cannot be read.
function readField(input) {
  const { kind, name } = input.dataset;
  const raw = input.type === 'checkbox' ? input.checked : input.value;
  if (kind === 'boolean') return { present: true, value: raw };
  if (raw === '') return { present: false };
  if (kind === 'number' || kind === 'integer') {
    const n = Number(raw);
    if (!Number.isFinite(n) || (kind === 'integer' && !Number.isInteger(n))) throw new Error(`${name}: expected ${kind === 'integer' ? 'an integer' : 'a number'}`);
    return { present: true, value: n };
  }
  if (kind === 'enum') return { present: true, value: JSON.parse(raw) };
  if (kind === 'json') {
    try { return { present: true, value: JSON.parse(raw) }; } catch (e) { throw new Error(`${name}: not JSON (${e.message})`); }
  }
  if (kind === 'text') {
    try { return { present: true, value: JSON.parse(raw) }; } catch { return { present: true, value: raw }; }
  }
  return { present: true, value: raw };
}

function readInput() {
  if ($('input-raw').checked) {
    const text = $('raw-input').value.trim();
    if (!text) throw new Error('the raw input is empty: enter JSON, e.g. "hello" or {"text": "hello"}');
    try { return JSON.parse(text); } catch (e) { throw new Error(`the raw input is not JSON: ${e.message}`); }
  }
  const box = $('schema-fields');
  const inputs = [...box.querySelectorAll('input, select, textarea')];
  if (box.dataset.shape === 'object') {
    const value = {};
    const missing = [];
    for (const input of inputs) {
      const field = readField(input);
      if (field.present) value[input.dataset.name] = field.value;
      else if (input.getAttribute('aria-required') === 'true') missing.push(input.dataset.name);
    }
    if (missing.length) throw new Error(`fill in the required field${missing.length > 1 ? 's' : ''}: ${missing.join(', ')}`);
    return value;
  }
  const field = readField(inputs[0]);
  if (!field.present) throw new Error('enter the input');
  return field.value;
}

function readContract() {
  if (!$('use-contract').checked) return null;
  const budget = {};
  if ($('max-tokens').value) budget.max_tokens = Number($('max-tokens').value);
  if ($('max-cost').value) budget.max_cost_usd = Number($('max-cost').value);
  const policy = { failure_policy: $('failure-policy').value };
  if (Object.keys(budget).length) policy.budget = budget;
  return {
    contract_id: '',
    objective: $('objective').value,
    success_criteria: $('criteria').value.split('\n').map((s) => s.trim()).filter(Boolean),
    policy,
  };
}

async function runTask(event) {
  event.preventDefault();
  showError('');
  if (state.connection === null) { showError('Connect to a delegate first.'); return; }
  let input;
  try { input = readInput(); } catch (e) { showError(`Input: ${e.message}`); return; }
  const request = {
    skill: $('skill').value,
    input,
    session: $('session').value,
    mode: $('mode').value || null,
    contract: readContract(),
  };
  $('run').disabled = true;
  try {
    const answer = await api(`/api/connections/${state.connection}/call`, request);
    startTask(answer.task, answer.session);
  } catch (e) {
    showError(`The task was not started: ${e.message}`);
    $('run').disabled = false;
  }
}

function startTask(taskId, sessionId) {
  state.task = taskId;
  const session = $('session');
  if (![...session.options].some((o) => o.value === sessionId)) {
    session.append(el('option', { value: sessionId, text: `session ${sessionId}` }));
  }
  session.value = sessionId;
  $('task').hidden = false;
  $('result').hidden = true;
  $('partial').textContent = '';
  $('progress-log').replaceChildren();
  $('task-progress').removeAttribute('value');
  $('task-state').textContent = `Running ${skillLabel()} in session ${sessionId}…`;
  $('cancel').disabled = false;
  state.source?.close();
  // The server replays a task's events from the start on every connection: count what was seen, skip it after a
  // reconnect.
  let seen = 0;
  let position = 0;
  const source = new EventSource(`/api/tasks/${taskId}/events`);
  state.source = source;
  source.addEventListener('open', () => { position = 0; });
  source.addEventListener('events', (message) => {
    for (const event of JSON.parse(message.data)) {
      position += 1;
      if (position <= seen) continue;
      seen += 1;
      onTaskEvent(event);
      if (event.kind === 'result' || event.kind === 'failed') source.close();
    }
  });
  source.addEventListener('error', () => {
    if (source.readyState === EventSource.CLOSED) $('task-state').textContent = 'The event stream closed.';
  });
}

function skillLabel() {
  return `${$('skill').value}`;
}

function onTaskEvent(event) {
  switch (event.kind) {
    case 'submitted':
      $('task-state').textContent = `Task ${event.task_id} submitted in session ${event.session_id}; waiting…`;
      break;
    case 'progress': {
      if (typeof event.progress === 'number') $('task-progress').value = event.progress;
      const pct = typeof event.progress === 'number' ? `${Math.round(event.progress * 100)}% ` : '';
      $('progress-log').append(el('li', { text: `${pct}${event.message ?? ''}` }));
      break;
    }
    case 'partial':
      $('partial').textContent += typeof event.chunk === 'string' ? event.chunk : JSON.stringify(event.chunk);
      break;
    case 'cancelling':
      $('task-state').textContent = 'Cancel sent; waiting for the delegate…';
      break;
    case 'result':
      finishTask(`Completed.`, false);
      showResult(event);
      break;
    case 'failed':
      finishTask(`Failed: ${event.error}`, true);
      if (event.detail && event.detail.partial_output !== undefined) {
        $('partial').textContent += `\n[partial output] ${pretty(event.detail.partial_output)}`;
      }
      break;
    default:
      break;
  }
}

function finishTask(text, failed) {
  $('task-state').textContent = text;
  $('task-state').className = failed ? 'error' : 'ok';
  $('task-progress').value = failed ? 0 : 1;
  $('cancel').disabled = true;
  $('run').disabled = false;
  refreshSessions();
}

function showResult(event) {
  $('result').hidden = false;
  $('output').textContent = pretty(event.output);
  const p = event.provenance || {};
  const rows = [
    ['Produced by', p.produced_by],
    ['Model version', p.model_version],
    ['Payload mode used', p.payload_mode_used],
    ['Confidence', p.confidence],
    ['Tokens used', p.tokens_used],
    ['Cost (USD)', p.cost_usd],
    ['Contract satisfied', p.contract_satisfied],
    ['Contract violations', (p.contract_violations || []).join('; ') || null],
    ['Verified', p.verified],
    ['Usage receipt', event.receipt],
    ['Fallbacks', (event.fallbacks || []).map(([a, b]) => `${a} → ${b}`).join(', ') || null],
  ].filter(([, v]) => v !== undefined && v !== null);
  $('provenance').replaceChildren(...rows.flatMap(([k, v]) => [el('dt', { text: k }), el('dd', { text: String(v) })]));
  $('lineage').replaceChildren(...(p.lineage || []).map((entry) =>
    el('li', { text: `${entry.delegate_id}: ${entry.step} (${entry.model_version}${entry.verification_status ? `, ${entry.verification_status}` : ''})` })));
  if (!(p.lineage || []).length) $('lineage').append(el('li', { text: 'no lineage: the delegate did the work itself' }));
  $('provenance-json').textContent = pretty(p);
}

async function cancelTask() {
  if (state.task === null) return;
  $('cancel').disabled = true;
  try {
    await api(`/api/tasks/${state.task}/cancel`, {});
  } catch (e) {
    showError(`Cancel: ${e.message}`);
    $('cancel').disabled = false;
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Sessions and the wire log

async function refreshSessions() {
  if (state.connection === null) return;
  try {
    const answer = await api(`/api/connections/${state.connection}/sessions`);
    const section = $('view-sessions');
    if (!answer.sessions.length) return;
    section.replaceChildren(...answer.sessions.map((s) => el('article', { class: 'session' },
      el('h2', { text: `Session ${s.session_id}` }),
      el('p', { text: `mode ${s.mode}; fallback chain ${s.fallback_chain.join(' → ') || 'none'}` }),
      el('ol', {}, s.turns.map((t) => el('li', {},
        el('strong', { text: `${t.skill} (${t.status})` }),
        el('div', {}, 'input: ', el('code', { text: JSON.stringify(t.input) })),
        t.output !== undefined ? el('div', {}, 'output: ', el('code', { text: JSON.stringify(t.output) })) : null,
        t.error ? el('div', { class: 'error', text: `error: ${t.error}` }) : null)))))); 
  } catch (e) {
    showError(`Sessions: ${e.message}`);
  }
}

async function refreshWire() {
  if (state.connection === null) return;
  try {
    const answer = await api(`/api/connections/${state.connection}/wire?since=${state.wireSeq}`);
    const body = $('wire').querySelector('tbody');
    for (const entry of answer.entries) {
      state.wireSeq = entry.seq + 1;
      state.wire.push(entry);
      let text = entry.text;
      try { text = JSON.stringify(JSON.parse(entry.text), null, 2); } catch { /* shown as it came */ }
      const preId = `wire-${entry.seq}`;
      body.append(el('tr', { class: entry.direction },
        el('td', { text: String(entry.seq) }),
        el('td', { text: entry.direction === 'out' ? '→ sent' : '← received' }),
        el('td', { text: entry.message_type }),
        el('td', { text: entry.task_id ?? '' }),
        el('td', { text: entry.signed ?? 'no' }),
        el('td', {}, el('details', {}, el('summary', { text: 'envelope' }), el('pre', { id: preId, text }),
          el('button', { type: 'button', class: 'copy', 'data-copy': preId, text: 'Copy' })))));
    }
  } catch (e) {
    showError(`Wire log: ${e.message}`);
  }
}

// ---------------------------------------------------------------------------------------------------------------
// LCTL chains

async function checkChain(event) {
  event?.preventDefault();
  showError('');
  const text = $('lctl-text').value;
  if (!text.trim()) { showError('Paste or upload an LCTL document first.'); return; }
  try {
    drawChain(await api('/api/lctl', { text }));
  } catch (e) {
    showError(`LCTL: ${e.message}`);
    $('chain-summary').textContent = '';
    $('chain-diagram').replaceChildren();
  }
}

async function showTaskChain() {
  showError('');
  try {
    const chain = await api(`/api/tasks/${state.task}/chain`);
    $('lctl-text').value = chain.yaml;
    drawChain(chain);
    selectTab($('tab-chain'));
    $('tab-chain').focus();
  } catch (e) {
    showError(`Chain: ${e.message}`);
  }
}

const SVG = 'http://www.w3.org/2000/svg';
function svg(tag, attrs = {}, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  if (text !== undefined) node.textContent = text;
  return node;
}

function clip(text, n) {
  return text.length > n ? `${text.slice(0, n - 1)}…` : text;
}

// One row per step number (parallel branches side by side), the findings about each step beside it.
function drawChain(chain) {
  const verdict = chain.ok ? 'breaks no rule' : 'breaks rules';
  replace($('chain-summary'), el('p', { class: chain.ok ? 'ok' : 'error', id: 'chain-verdict' },
    `Chain ${chain.chain?.id ?? ''} ${verdict}: ${chain.errors} error(s), ${chain.warnings} warning(s), ${chain.notes} note(s).`),
  chain.parallel_groups.length ? el('p', { text: `Parallel: ${chain.parallel_groups.join('; ')}` }) : null,
  chain.failures.length ? el('p', { class: 'error', text: chain.failures.map((f) => `failed at step ${f.failed_at_step}${f.agent ? ` (${f.agent})` : ''}${f.error ? `: ${f.error}` : ''}`).join('; ') }) : null);
  const rows = [];
  for (const step of chain.steps) {
    const last = rows[rows.length - 1];
    if (last && last.number === step.step && step.parallel) last.steps.push(step);
    else rows.push({ number: step.step, steps: [step] });
  }
  const box = 250, gap = 16, height = 86, arrow = 28;
  const grid = el('div', { class: 'chain', role: 'list', 'aria-label': 'Trace steps' });
  rows.forEach((row, i) => {
    const width = row.steps.length * box + (row.steps.length - 1) * gap;
    const drawing = svg('svg', { width, height: height + (i < rows.length - 1 ? arrow : 0), role: 'img',
      'aria-label': row.steps.map((s) => `step ${s.step}: ${s.agent}${s.action ? `, ${s.action}` : ''}${s.confidence !== null ? `, confidence ${s.confidence}` : ''}${s.failed ? ', failed' : ''}`).join('; ') });
    row.steps.forEach((s, j) => {
      const x = j * (box + gap);
      const severity = s.findings.some((f) => f.severity === 'error') ? 'error' : s.findings.some((f) => f.severity === 'warning') ? 'warning' : 'none';
      drawing.append(svg('rect', { x: 1, y: 1, width: box - 2, height: height - 2, rx: 8, class: `node ${s.failed ? 'failed' : ''} finding-${severity}`, transform: `translate(${x},0)` }));
      drawing.append(svg('text', { x: x + 10, y: 20, class: 'step-no' }, `step ${s.step}${s.parallel ? ' ∥' : ''}`));
      drawing.append(svg('text', { x: x + 10, y: 40, class: 'agent' }, clip(s.agent, 30)));
      drawing.append(svg('text', { x: x + 10, y: 58, class: 'action' }, clip(s.action ?? '', 34)));
      if (s.confidence !== null && s.confidence !== undefined) {
        drawing.append(svg('rect', { x: x + 10, y: 66, width: box - 20, height: 8, class: 'bar-bg' }));
        drawing.append(svg('rect', { x: x + 10, y: 66, width: Math.max(0, Math.min(1, s.confidence)) * (box - 20), height: 8, class: 'bar' }));
      }
    });
    if (i < rows.length - 1) {
      const cx = width / 2;
      drawing.append(svg('line', { x1: cx, y1: height, x2: cx, y2: height + arrow - 6, class: 'edge' }));
      drawing.append(svg('path', { d: `M${cx - 5},${height + arrow - 10} L${cx},${height + arrow - 2} L${cx + 5},${height + arrow - 10} Z`, class: 'edge-head' }));
    }
    const findings = row.steps.flatMap((s) => s.findings.map((f) => ({ ...f, step: s })));
    const notes = el('ul', { class: 'findings', 'aria-label': `Findings for step ${row.number}` },
      findings.length ? findings.map((f) => el('li', { class: f.severity },
        el('strong', { text: `${f.severity} [${f.rule}]` }), ` ${f.path}: ${f.message}`))
        : el('li', { class: 'none', text: 'no findings' }));
    grid.append(el('div', { class: 'chain-row', role: 'listitem', 'data-step': String(row.number) }, drawing, notes));
  });
  $('chain-diagram').replaceChildren(grid);
  $('chain-other').replaceChildren(...(chain.other_findings.length ? [el('h3', { text: 'Findings about the document' }),
    el('ul', { class: 'findings' }, chain.other_findings.map((f) => el('li', { class: f.severity },
      el('strong', { text: `${f.severity} [${f.rule}]` }), ` ${f.path}: ${f.message}`)))] : []));
}

async function loadFile() {
  const file = $('lctl-file').files[0];
  if (!file) return;
  if (file.size > 1024 * 1024) { showError(`${file.name} is larger than 1 MiB: not an LCTL chain`); return; }
  $('lctl-text').value = await file.text();
  await checkChain();
}

// ---------------------------------------------------------------------------------------------------------------
// Conformance

async function runKit(event) {
  event.preventDefault();
  showError('');
  if (state.connection === null) { showError('Connect to a delegate first.'); return; }
  const started = Date.now();
  $('run-kit').disabled = true;
  const summary = $('kit-summary');
  summary.textContent = 'Running the conformance kit… (up to three minutes)';
  const tick = setInterval(() => { summary.textContent = `Running the conformance kit… ${Math.round((Date.now() - started) / 1000)} s`; }, 1000);
  try {
    const report = await api(`/api/connections/${state.connection}/conformance`, { level: $('level').value }, 200000);
    clearInterval(tick);
    const s = report.summary;
    replace(summary, el('p', { id: 'kit-verdict', class: report.passed ? 'ok' : 'error' },
      `${report.passed ? 'PASSED' : 'FAILED'}: ${s.passed} passed, ${s.failures} failures, ${s.warnings} warnings, ${s.skipped} skipped (${(report.elapsed_ms / 1000).toFixed(1)} s, ${report.kit}).`),
    el('ul', { id: 'kit-profiles', 'aria-label': 'Adoption profiles' }, (report.profiles || []).map((p) => el('li', { class: p.met ? 'ok' : 'bad' },
      `profile ${p.profile} (${p.name}): ${p.met ? 'met' : `not met (${p.missing.join(', ')})`}`))));
    const body = $('kit').querySelector('tbody');
    // The verdict column is the requirement's outcome: a failed SHOULD is a warning, not a failure of the run.
    body.replaceChildren(...report.requirements.map((r) => el('tr', { class: `outcome-${r.outcome}`, 'data-outcome': r.outcome },
      el('th', { scope: 'row', text: r.id }),
      el('td', { text: r.level }),
      el('td', {}, el('details', {}, el('summary', { text: r.title }), el('p', { text: `${r.section}: ${r.source}` }),
        el('ul', {}, r.details.map((d) => el('li', { text: d }))))),
      el('td', { text: r.outcome }))));
    filterKit();
  } catch (e) {
    clearInterval(tick);
    summary.textContent = '';
    showError(`Conformance: ${e.message}`);
  } finally {
    $('run-kit').disabled = false;
  }
}

function filterKit() {
  const failuresOnly = $('kit-failures').checked;
  for (const row of $('kit').querySelectorAll('tbody tr')) {
    row.hidden = failuresOnly && ['pass', 'skipped'].includes(row.dataset.outcome);
  }
}

// ---------------------------------------------------------------------------------------------------------------

function setup() {
  setupTabs();
  $('connect-form').addEventListener('submit', connect);
  $('call-form').addEventListener('submit', runTask);
  $('skill').addEventListener('change', renderSchemaFields);
  for (const radio of document.querySelectorAll('input[name=input-kind]')) {
    radio.addEventListener('change', () => {
      const raw = $('input-raw').checked;
      $('raw-input-box').hidden = !raw;
      $('schema-fields').hidden = raw;
    });
  }
  $('cancel').addEventListener('click', cancelTask);
  $('show-chain').addEventListener('click', showTaskChain);
  $('wire-refresh').addEventListener('click', refreshWire);
  $('wire-copy').addEventListener('click', (e) => copy(state.wire.map((w) => JSON.stringify(w)).join('\n'), e.target));
  $('lctl-form').addEventListener('submit', checkChain);
  $('lctl-file').addEventListener('change', loadFile);
  $('conformance-form').addEventListener('submit', runKit);
  $('kit-failures').addEventListener('change', filterKit);
  document.addEventListener('click', (event) => {
    const button = event.target.closest('button.copy');
    if (!button) return;
    button.dataset.label ??= button.textContent;
    copy($(button.dataset.copy)?.textContent ?? '', button);
  });
  // The wire tab refreshes itself while it is shown.
  setInterval(() => { if (!$('view-wire').hidden) refreshWire(); }, 1000);
  api('/api/defaults').then((d) => {
    if (d.url) {
      $('url').value = d.url;
      if (d.token_given) $('token').placeholder = 'the token given to ldp inspect';
      connect();
    }
  }).catch((e) => showError(e.message));
  performance.mark('inspector-ready');
}

setup();
