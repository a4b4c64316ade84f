// The Mew dashboard: a view over the node's own API (A2A over HTTP+JSON, /agents, /status)
// and the few routes the node adds for it under /ui (sign-in, a feed of task changes, a
// task's event log, the node's parts).
//
// Everything a task holds is untrusted: the page builds DOM nodes and sets text, never
// markup (no innerHTML anywhere), links only to http(s) and mailto, and the node's
// Content-Security-Policy allows no inline script. Written as one plain script so the node
// serves it as it is in the repository: no build step.
'use strict';

const FINAL = new Set(['TASK_STATE_COMPLETED', 'TASK_STATE_FAILED', 'TASK_STATE_CANCELED', 'TASK_STATE_REJECTED']);
// The states a task waits in for its user (it asks, or a sign-in), with no stream to follow.
const WAITS = new Set(['TASK_STATE_INPUT_REQUIRED', 'TASK_STATE_AUTH_REQUIRED']);
const STATES = ['SUBMITTED', 'WORKING', 'INPUT_REQUIRED', 'AUTH_REQUIRED', 'COMPLETED', 'FAILED', 'CANCELED', 'REJECTED'];
const PAGE = 50;

const app = {
  session: null, // { auth, principal, csrf }
  roles: [], // role cards from /agents
  feed: null, // EventSource of /ui/api/events
  listeners: new Set(), // views that want feed events: fn(summary | null for reset)
  cleanup: [], // what the current view closes when the next one opens
};

// ---- DOM ------------------------------------------------------------------------------

/** An element with attributes/properties and children (strings become text nodes). */
function h(tag, props, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(props || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === 'class') el.className = value;
    else if (key.startsWith('on')) el.addEventListener(key.slice(2), value);
    else if (key === 'dataset') Object.assign(el.dataset, value);
    else if (key === 'value') el.value = value;
    else el.setAttribute(key, value === true ? '' : String(value));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

function show(...children) {
  const main = document.getElementById('main');
  main.replaceChildren();
  append(main, children);
}

function stateName(state) {
  return String(state || 'TASK_STATE_UNSPECIFIED').replace('TASK_STATE_', '').toLowerCase();
}

function badge(state) {
  return h('span', { class: `state ${stateName(state)}`, 'data-state': stateName(state) }, stateName(state).replace('_', ' '));
}

/** A two-column list of labels and values: each one its own cell. */
function grid(attrs, ...pairs) {
  const el = h('div', attrs);
  for (let i = 0; i + 1 < pairs.length; i += 2) {
    el.append(h('span', { class: 'key' }, pairs[i]), h('span', { class: 'value' }, pairs[i + 1]));
  }
  return el;
}

function when(timestamp) {
  if (!timestamp) return '';
  const date = new Date(timestamp);
  return Number.isNaN(date.getTime()) ? String(timestamp) : date.toLocaleString();
}

function safeHref(url) {
  try {
    const parsed = new URL(url, location.href);
    return ['http:', 'https:', 'mailto:'].includes(parsed.protocol) ? parsed.href : null;
  } catch {
    return null;
  }
}

function link(href, text) {
  const safe = safeHref(href);
  return safe ? h('a', { href: safe, rel: 'noopener noreferrer', target: '_blank' }, text) : text;
}

// ---- Markdown, safely -----------------------------------------------------------------

/** Markdown's common subset as DOM nodes: headings, lists, quotes, fenced code, paragraphs;
 * inline code, bold, italics and links. Raw HTML stays text. */
function markdown(source) {
  const root = h('div', { class: 'md' });
  const lines = String(source).replace(/\r\n?/g, '\n').split('\n');
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    const fence = line.match(/^\s*(```|~~~)/);
    if (fence) {
      const body = [];
      i += 1;
      while (i < lines.length && !lines[i].trim().startsWith(fence[1])) body.push(lines[i++]);
      i += 1;
      root.append(h('pre', {}, h('code', {}, body.join('\n'))));
      continue;
    }
    const heading = line.match(/^(#{1,6})\s+(.*)$/);
    if (heading) {
      root.append(h(`h${Math.min(heading[1].length + 1, 6)}`, {}, inline(heading[2])));
      i += 1;
      continue;
    }
    if (/^\s*([-*+]|\d+[.)])\s+/.test(line)) {
      const ordered = /^\s*\d/.test(line);
      const list = h(ordered ? 'ol' : 'ul');
      while (i < lines.length && /^\s*([-*+]|\d+[.)])\s+/.test(lines[i])) {
        list.append(h('li', {}, inline(lines[i].replace(/^\s*([-*+]|\d+[.)])\s+/, ''))));
        i += 1;
      }
      root.append(list);
      continue;
    }
    if (/^\s*>/.test(line)) {
      const quoted = [];
      while (i < lines.length && /^\s*>/.test(lines[i])) quoted.push(lines[i++].replace(/^\s*>\s?/, ''));
      root.append(h('blockquote', {}, inline(quoted.join(' '))));
      continue;
    }
    if (!line.trim()) {
      i += 1;
      continue;
    }
    const paragraph = [];
    while (i < lines.length && lines[i].trim() && !/^(#{1,6}\s|\s*```|\s*~~~|\s*>|\s*([-*+]|\d+[.)])\s)/.test(lines[i])) {
      paragraph.push(lines[i++]);
    }
    root.append(h('p', {}, inline(paragraph.join(' '))));
  }
  return root;
}

function inline(text) {
  const out = [];
  const pattern = /(`[^`]+`)|(\*\*[^*]+\*\*)|(\*[^*\s][^*]*\*|_[^_\s][^_]*_)|(\[[^\]]+\]\([^)\s]+\))/g;
  let last = 0;
  for (const match of text.matchAll(pattern)) {
    if (match.index > last) out.push(text.slice(last, match.index));
    const token = match[0];
    if (match[1]) out.push(h('code', {}, token.slice(1, -1)));
    else if (match[2]) out.push(h('strong', {}, token.slice(2, -2)));
    else if (match[3]) out.push(h('em', {}, token.slice(1, -1)));
    else {
      const [, label, href] = token.match(/^\[([^\]]+)\]\(([^)\s]+)\)$/);
      out.push(link(href, label));
    }
    last = match.index + token.length;
  }
  if (last < text.length) out.push(text.slice(last));
  return out;
}

// ---- The API --------------------------------------------------------------------------

class ApiError extends Error {}

async function call(method, path, body) {
  const headers = { Accept: 'application/json', 'A2A-Version': '1.0' };
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  if (method !== 'GET' && app.session && app.session.csrf) headers['X-CSRF-Token'] = app.session.csrf;
  const response = await fetch(path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    credentials: 'same-origin',
  });
  const text = await response.text();
  let json = null;
  try {
    json = text ? JSON.parse(text) : null;
  } catch {
    json = null;
  }
  if (response.status === 401 && app.session && app.session.principal) {
    signIn('Your session ended; sign in again.');
    throw new ApiError('unauthenticated');
  }
  if (!response.ok) {
    const message = (json && json.error && json.error.message) || text || response.statusText;
    throw new ApiError(`${response.status}: ${message}`);
  }
  return json;
}

/** The A2A base of a role: its own interface, or the node's front agent. */
function base(role) {
  return role ? `/agents/${encodeURIComponent(role)}` : '';
}

function mewOf(metadata) {
  return (metadata && metadata.mew) || {};
}

function roleOf(task) {
  return mewOf(task.metadata).role || '';
}

function textOf(message) {
  if (!message || !message.parts) return '';
  return message.parts.filter((p) => typeof p.text === 'string').map((p) => p.text).join('\n');
}

function traceIdOf(task) {
  const parent = mewOf(task.metadata).traceparent;
  const match = parent && parent.match(/^[0-9a-f]{2}-([0-9a-f]{32})-[0-9a-f]{16}-[0-9a-f]{2}$/);
  return match ? match[1] : null;
}

function usageText(usage) {
  if (!usage) return '';
  const tokens = (usage.inputTokens || 0) + (usage.outputTokens || 0);
  const calls = usage.modelCalls || 0;
  return `${tokens} tokens${calls ? `, ${calls} model call${calls > 1 ? 's' : ''}` : ''}`;
}

// ---- Live feed ------------------------------------------------------------------------

function startFeed() {
  if (app.feed) return;
  const feed = new EventSource('/ui/api/events');
  const dot = document.getElementById('live');
  feed.addEventListener('ready', () => dot.classList.add('on'));
  feed.addEventListener('task', (event) => {
    let summary;
    try {
      summary = JSON.parse(event.data);
    } catch {
      return;
    }
    for (const listener of app.listeners) listener(summary);
  });
  feed.addEventListener('reset', () => {
    for (const listener of app.listeners) listener(null);
  });
  // EventSource reconnects by itself, sending the last event id: nothing is missed.
  feed.onerror = () => dot.classList.remove('on');
  app.feed = feed;
}

function listen(listener) {
  app.listeners.add(listener);
  app.cleanup.push(() => app.listeners.delete(listener));
}

// ---- Sign-in --------------------------------------------------------------------------

function signIn(message) {
  if (app.feed) {
    app.feed.close();
    app.feed = null;
  }
  const input = h('input', { type: 'password', id: 'credential', autocomplete: 'current-password', placeholder: 'API key or JWT' });
  const problem = h('p', { class: 'error', id: 'signin-error' }, message || '');
  const form = h(
    'form',
    {
      class: 'card signin',
      id: 'signin',
      onsubmit: async (event) => {
        event.preventDefault();
        try {
          app.session = await call('POST', '/ui/session', { credential: input.value });
          start();
        } catch (error) {
          problem.textContent = error.message;
        }
      },
    },
    h('h1', {}, 'Sign in'),
    h('p', { class: 'muted' }, 'This node asks for credentials: an API key or a token its auth: section accepts.'),
    input,
    h('button', { class: 'primary', type: 'submit' }, 'Sign in'),
    problem,
  );
  document.getElementById('who').replaceChildren();
  show(form);
  input.focus();
}

async function signOut() {
  await call('DELETE', '/ui/session');
  app.session = { auth: true, principal: null };
  signIn('Signed out.');
}

// ---- Views ----------------------------------------------------------------------------

function route() {
  for (const close of app.cleanup.splice(0)) close();
  const [view, ...rest] = location.hash.replace(/^#\/?/, '').split('/');
  for (const a of document.querySelectorAll('#nav a')) a.classList.toggle('on', a.dataset.view === (view || 'tasks'));
  const arg = rest.map(decodeURIComponent).join('/');
  const views = { tasks: tasksView, task: taskView, send: sendView, roles: rolesView, node: nodeView };
  const render = views[view] || tasksView;
  render(arg).catch((error) => show(h('p', { class: 'error' }, error.message)));
}

/** The filters of the task list, kept in the address as a query after the view. */
function filtersFromHash() {
  const query = location.hash.split('?')[1] || '';
  const params = new URLSearchParams(query);
  return { role: params.get('role') || '', state: params.get('state') || '', context: params.get('context') || '', since: params.get('since') || '' };
}

function matches(filters, summary) {
  return (
    (!filters.role || summary.role === filters.role) &&
    (!filters.state || stateName(summary.state) === filters.state.toLowerCase()) &&
    (!filters.context || summary.contextId === filters.context) &&
    (!filters.since || new Date(summary.timestamp) >= new Date(filters.since))
  );
}

async function tasksView() {
  const filters = filtersFromHash();
  const rows = new Map();
  const body = h('tbody', { id: 'task-rows' });
  const more = h('button', { id: 'more', disabled: true }, 'Older tasks');
  const count = h('span', { class: 'muted', id: 'task-count' });
  let pageToken = '';

  const setFilter = (key, value) => {
    const next = { ...filters, [key]: value };
    const params = new URLSearchParams(Object.entries(next).filter(([, v]) => v));
    location.hash = `#/tasks?${params}`;
  };
  const roleSelect = h('select', { id: 'filter-role', onchange: (e) => setFilter('role', e.target.value) }, h('option', { value: '' }, 'every role'), app.roles.map((r) => h('option', { value: r.name, selected: r.name === filters.role }, r.name)));
  const stateSelect = h('select', { id: 'filter-state', onchange: (e) => setFilter('state', e.target.value) }, h('option', { value: '' }, 'every state'), STATES.map((s) => h('option', { value: s, selected: s === filters.state }, s.toLowerCase().replace('_', ' '))));
  const context = h('input', { id: 'filter-context', placeholder: 'context id', value: filters.context, onchange: (e) => setFilter('context', e.target.value.trim()) });
  const since = h('input', { id: 'filter-since', type: 'datetime-local', value: filters.since, onchange: (e) => setFilter('since', e.target.value) });

  const row = (summary) => {
    const tr = h(
      'tr',
      { 'data-task': summary.id, 'data-state': stateName(summary.state) },
      h('td', { class: 'muted' }, when(summary.timestamp)),
      h('td', {}, summary.role || ''),
      h('td', {}, badge(summary.state)),
      // A task id's tail: its head is a time (UUIDv7), alike for tasks made together.
      h('td', { class: 'mono' }, h('a', { href: `#/task/${encodeURIComponent(summary.id)}`, title: summary.id }, `…${summary.id.slice(-12)}`)),
      h('td', { class: 'text' }, summary.text || ''),
      h('td', { class: 'muted' }, usageText(summary.usage)),
    );
    return tr;
  };
  const summaryOf = (task) => ({
    id: task.id,
    contextId: task.contextId,
    role: roleOf(task),
    state: task.status.state,
    timestamp: task.status.timestamp,
    text: textOf(task.status.message).slice(0, 240),
    usage: mewOf(task.metadata).usage,
  });

  const load = async () => {
    const params = new URLSearchParams({ pageSize: String(PAGE), historyLength: '0' });
    if (filters.state) params.set('status', `TASK_STATE_${filters.state}`);
    if (filters.context) params.set('contextId', filters.context);
    if (filters.since) params.set('statusTimestampAfter', new Date(filters.since).toISOString());
    if (pageToken) params.set('pageToken', pageToken);
    const page = await call('GET', `${base(filters.role)}/tasks?${params}`);
    for (const task of page.tasks || []) {
      if (rows.has(task.id)) continue;
      const tr = row(summaryOf(task));
      rows.set(task.id, tr);
      body.append(tr);
    }
    pageToken = page.nextPageToken || '';
    more.disabled = !pageToken;
    count.textContent = `${page.totalSize ?? rows.size} tasks`;
  };
  more.addEventListener('click', () => load().catch((e) => alert(e.message)));

  listen((summary) => {
    if (summary === null) {
      rows.clear();
      body.replaceChildren();
      pageToken = '';
      load();
      return;
    }
    if (!matches(filters, summary)) return;
    const tr = row(summary);
    tr.classList.add('fresh');
    const old = rows.get(summary.id);
    if (old) old.remove();
    rows.set(summary.id, tr);
    body.prepend(tr);
  });

  show(
    h('h1', {}, 'Tasks ', count),
    h('div', { class: 'row filters' }, roleSelect, stateSelect, context, since, h('a', { href: '#/tasks' }, 'clear')),
    h('table', {}, h('thead', {}, h('tr', {}, ['When', 'Role', 'State', 'Task', 'Status', 'Usage'].map((t) => h('th', {}, t)))), body),
    h('p', {}, more),
  );
  await load();
}

function partView(part, index) {
  const name = part.filename || `part-${index + 1}`;
  if (typeof part.text === 'string') {
    const md = (part.mediaType || '').includes('markdown') || /\.md$/i.test(part.filename || '');
    return md ? markdown(part.text) : h('pre', { class: 'text-part' }, part.text);
  }
  if (part.data !== undefined) {
    const json = JSON.stringify(part.data, null, 2);
    const blob = new Blob([json], { type: 'application/json' });
    return h('div', {}, h('pre', {}, json), h('a', { href: URL.createObjectURL(blob), download: `${name}.json` }, 'download JSON'));
  }
  if (typeof part.raw === 'string') {
    let bytes;
    try {
      bytes = Uint8Array.from(atob(part.raw), (c) => c.charCodeAt(0));
    } catch {
      return h('p', { class: 'error' }, `${name}: not base64`);
    }
    // Served as a download only: never shown inline, whatever its media type says.
    const blob = new Blob([bytes], { type: 'application/octet-stream' });
    return h('p', {}, h('a', { href: URL.createObjectURL(blob), download: name }, `download ${name}`), h('span', { class: 'muted' }, ` ${bytes.length} bytes, ${part.mediaType || 'unknown type'}`));
  }
  if (typeof part.url === 'string') return h('p', {}, link(part.url, part.filename || part.url));
  return h('pre', {}, JSON.stringify(part));
}

function artifactView(artifact) {
  return h('div', { class: 'card artifact', 'data-artifact': artifact.artifactId }, h('strong', {}, artifact.name || artifact.artifactId), artifact.description ? h('span', { class: 'muted' }, ` ${artifact.description}`) : null, (artifact.parts || []).map(partView));
}

function messageView(message) {
  const who = message.role === 'ROLE_USER' ? 'user' : 'agent';
  return h('div', { class: `card message ${who}` }, h('strong', {}, who), ' ', (message.parts || []).map(partView));
}

/** One entry of a task's log as a line of its timeline. */
function logLine(entry) {
  const event = entry.event || {};
  if (event.statusUpdate) {
    const status = event.statusUpdate.status || {};
    const mew = mewOf(event.statusUpdate.metadata);
    const text = textOf(status.message);
    const tool = mew.tool;
    if (mew.hook) {
      const hook = mew.hook;
      return h(
        'li',
        { 'data-kind': 'hook', 'data-outcome': hook.outcome },
        h('span', { class: 'when' }, when(status.timestamp)),
        h('span', { class: hook.outcome === 'ok' ? 'muted' : 'error' }, `hook ${hook.name} (${hook.event}): ${hook.outcome}`),
        hook.reason ? ` ${hook.reason}` : '',
      );
    }
    return h(
      'li',
      { 'data-kind': tool ? 'tool' : 'status' },
      h('span', { class: 'when' }, when(status.timestamp)),
      badge(status.state),
      ' ',
      tool ? h('span', { class: 'mono tool' }, `${tool.phase || ''} ${tool.name || ''} `, tool.detail && tool.detail.input !== undefined ? JSON.stringify(tool.detail.input) : '', tool.detail && tool.detail.isError ? ' (error)' : '') : null,
      tool && tool.detail && typeof tool.detail.output === 'string' && tool.detail.output ? h('pre', { class: 'tool-output' }, tool.detail.output) : null,
      mew.child ? h('span', {}, `child ${mew.child.taskId || ''}: ${stateName(mew.child.state)} `) : null,
      mew.warning ? h('span', { class: 'error' }, mew.warning) : null,
      text ? h('span', {}, ` ${text.slice(0, 400)}`) : null,
    );
  }
  if (event.artifactUpdate) {
    const artifact = event.artifactUpdate.artifact || {};
    return h('li', { 'data-kind': 'artifact' }, h('span', { class: 'when' }, ''), `artifact ${artifact.name || artifact.artifactId}${event.artifactUpdate.append ? ' (more)' : ''}`);
  }
  if (event.task) return h('li', { 'data-kind': 'task' }, h('span', { class: 'when' }, when(event.task.status && event.task.status.timestamp)), 'created ', badge(event.task.status && event.task.status.state));
  if (event.message) return h('li', { 'data-kind': 'message' }, 'message ', textOf(event.message).slice(0, 400));
  return h('li', {}, JSON.stringify(event).slice(0, 200));
}

async function taskView(id) {
  let task = await call('GET', `/tasks/${encodeURIComponent(id)}?historyLength=100`);
  const header = h('div', { id: 'task-head' });
  const actions = h('div', { id: 'task-actions' });
  const artifacts = h('div', { id: 'artifacts' });
  const history = h('div', { id: 'history' });
  const timeline = h('ul', { class: 'timeline', id: 'timeline' });
  const children = h('div', { class: 'tree', id: 'children' });
  let logged = 0;

  const renderHead = () => {
    const mew = mewOf(task.metadata);
    const trace = traceIdOf(task);
    header.replaceChildren(
      h('h1', {}, 'Task ', h('span', { class: 'mono' }, task.id), ' ', badge(task.status.state)),
      grid(
        { class: 'grid card' },
        'role', roleOf(task) || '—',
        'context', h('span', { class: 'mono', id: 'task-context' }, task.contextId),
        'status', h('span', { id: 'task-status' }, when(task.status.timestamp), ' ', textOf(task.status.message)),
        'usage', usageText(mew.usage) || '—',
        'trace', trace ? h('span', { class: 'mono', id: 'trace-id' }, trace) : '—',
        'parent', mew.parentTask ? h('a', { href: `#/task/${encodeURIComponent(mew.parentTask)}` }, mew.parentTask) : '—',
      ),
    );
    renderActions();
    artifacts.replaceChildren(...(task.artifacts || []).map(artifactView));
    history.replaceChildren(...(task.history || []).map(messageView));
    loadTree().catch((error) => children.replaceChildren(h('p', { class: 'error' }, error.message)));
  };

  // The delegation tree, across nodes, from the node (which asks peers with their
  // credentials); read again whenever the task moves.
  const renderTree = (root) => {
    if (!root.children || !root.children.length) {
      children.replaceChildren(h('p', { class: 'muted' }, 'No delegations.'));
      return;
    }
    const item = (node) =>
      h(
        'li',
        { 'data-child': node.taskId, 'data-state': stateName(node.state) },
        node.local ? h('a', { href: `#/task/${encodeURIComponent(node.taskId)}`, title: node.taskId }, `…${node.taskId.slice(-12)}`) : h('span', { class: 'mono', title: node.taskId }, `…${node.taskId.slice(-12)}`),
        ' ',
        h('strong', { class: 'child-role' }, node.role || node.agent),
        node.local ? '' : h('span', { class: 'muted' }, ` on ${node.node}`),
        ' ',
        node.state ? badge(node.state) : null,
        node.description ? h('span', { class: 'muted' }, ` ${node.description}`) : null,
        node.own ? h('span', { class: 'muted' }, ` · ${usageText(node.own)}`) : null,
        node.error ? h('span', { class: 'error' }, ` ${node.error}`) : null,
        node.children && node.children.length ? h('ul', {}, node.children.map(item)) : null,
      );
    children.replaceChildren(
      h('p', { id: 'tree-total' }, `${root.tasks} task${root.tasks === 1 ? '' : 's'} in all: ${usageText(root.total) || 'no model use'}${root.missing ? ` (${root.missing} not reachable)` : ''}`),
      h('ul', {}, root.children.map(item)),
    );
  };
  // One read at a time: a change during a read asks for one more after it.
  let treeBusy = false;
  let treeAgain = false;
  const loadTree = async () => {
    if (!(mewOf(task.metadata).children || []).length) {
      renderTree({});
      return;
    }
    if (treeBusy) {
      treeAgain = true;
      return;
    }
    treeBusy = true;
    try {
      do {
        treeAgain = false;
        renderTree(await call('GET', `/ui/api/tasks/${encodeURIComponent(task.id)}/tree`));
      } while (treeAgain);
    } finally {
      treeBusy = false;
    }
  };

  const reply = async (parts) => {
    await call('POST', `${base(roleOf(task))}/message:send`, {
      message: { messageId: crypto.randomUUID(), role: 'ROLE_USER', taskId: task.id, contextId: task.contextId, parts },
      configuration: { returnImmediately: true },
    });
    await refresh();
  };

  const renderActions = () => {
    const state = task.status.state;
    const items = [];
    if (!FINAL.has(state)) {
      items.push(h('button', { class: 'danger', id: 'cancel', onclick: () => call('POST', `/tasks/${encodeURIComponent(task.id)}:cancel`, {}).then(refresh).catch((e) => alert(e.message)) }, 'Cancel task'));
    }
    if (state === 'TASK_STATE_INPUT_REQUIRED') {
      const message = task.status.message || {};
      const permission = mewOf(message.metadata).ask === 'permission';
      const ask = mewOf(message.metadata).permission || null;
      const box = h('div', { class: 'card ask', id: 'ask' }, h('strong', {}, permission ? 'Permission asked' : 'The task asks'), h('p', { id: 'ask-text' }, textOf(message)));
      if (ask) {
        box.append(grid({ class: 'grid' }, 'tool', h('span', { class: 'mono', id: 'ask-tool' }, ask.tool), 'arguments', h('pre', { id: 'ask-input' }, JSON.stringify(ask.input, null, 2)), 'asked by', h('span', { id: 'ask-rule' }, ask.rule || '—')));
      }
      const form = mewOf(message.metadata).ask === 'elicitation' ? (message.parts || []).find((p) => p.data && typeof p.data === 'object') : null;
      if (permission) {
        box.append(h('div', { class: 'row' }, h('button', { class: 'primary', id: 'allow', onclick: () => reply([{ data: { approved: true } }]).catch((e) => alert(e.message)) }, 'Allow'), h('button', { class: 'danger', id: 'deny', onclick: () => reply([{ data: { approved: false } }]).catch((e) => alert(e.message)) }, 'Deny')));
      } else if (form) {
        // An MCP server's question: a field for each property of its form, sent as a data part.
        const schema = form.data.requestedSchema || {};
        const fields = Object.entries(schema.properties || {}).map(([name, spec]) => {
          const kind = (spec && spec.type) || 'string';
          const input = h('input', { id: `field-${name}`, type: kind === 'boolean' ? 'checkbox' : 'text', placeholder: (spec && spec.description) || '' });
          box.append(h('label', {}, `${(spec && spec.title) || name} `, input));
          return [name, kind, input];
        });
        // Only a web address becomes a link: a server's `javascript:` URL must not run here.
        if (typeof form.data.url === 'string' && /^https?:\/\//i.test(form.data.url)) {
          box.append(h('p', {}, 'Open ', h('a', { href: form.data.url, target: '_blank', rel: 'noopener noreferrer', id: 'ask-url' }, form.data.url), ', then accept.'));
        }
        const values = () => Object.fromEntries(fields.map(([name, kind, input]) => [name, kind === 'boolean' ? input.checked : (kind === 'number' || kind === 'integer') ? Number(input.value) : input.value]));
        box.append(h('div', { class: 'row' },
          h('button', { class: 'primary', id: 'submit-form', onclick: () => reply([{ data: values() }]).catch((e) => alert(e.message)) }, fields.length ? 'Submit' : 'Accept'),
          h('button', { id: 'decline-ask', onclick: () => reply([{ text: 'decline' }]).catch((e) => alert(e.message)) }, 'Decline'),
          h('button', { class: 'danger', id: 'cancel-ask', onclick: () => reply([{ text: 'cancel' }]).catch((e) => alert(e.message)) }, 'Cancel')));
      } else {
        const answer = h('textarea', { id: 'answer', placeholder: 'Your reply' });
        box.append(answer, h('button', { class: 'primary', id: 'send-answer', onclick: () => reply([{ text: answer.value }]).catch((e) => alert(e.message)) }, 'Reply'));
      }
      items.push(box);
    }
    if (state === 'TASK_STATE_AUTH_REQUIRED') {
      // An MCP server asks the user to sign in: the page to open; the node's own callback
      // continues the task, and the feed shows it going on.
      const message = task.status.message || {};
      const data = (message.parts || []).find((p) => p.data && typeof p.data === 'object');
      const box = h('div', { class: 'card ask', id: 'ask' }, h('strong', {}, 'Sign-in asked'), h('p', { id: 'ask-text' }, textOf(message)));
      // Only a web address becomes a link: a server's `javascript:` URL must not run here.
      if (data && typeof data.data.url === 'string' && /^https?:\/\//i.test(data.data.url)) {
        box.append(h('p', {}, 'Open ', h('a', { href: data.data.url, target: '_blank', rel: 'noopener noreferrer', id: 'auth-url' }, 'the sign-in page'), '; the task goes on by itself once you have signed in.'));
      }
      items.push(box);
    }
    if (FINAL.has(state)) {
      items.push(h('a', { href: `#/send/${encodeURIComponent(roleOf(task))}?context=${encodeURIComponent(task.contextId)}`, id: 'continue' }, 'Continue this context'));
    }
    actions.replaceChildren(...items);
  };

  const loadLog = async () => {
    for (;;) {
      const page = await call('GET', `/ui/api/tasks/${encodeURIComponent(task.id)}/events?after=${logged}`);
      for (const entry of page.events || []) {
        timeline.append(logLine(entry));
        logged = entry.number;
      }
      if (!page.next) break;
    }
  };

  const refresh = async () => {
    task = await call('GET', `/tasks/${encodeURIComponent(task.id)}?historyLength=100`);
    renderHead();
    await loadLog();
    watch();
  };

  // While the task runs: its own stream (artifacts grow as they are sent), and its log.
  let stream = null;
  const watch = () => {
    if (stream || FINAL.has(task.status.state) || WAITS.has(task.status.state)) return;
    // EventSource sends no headers: the protocol version goes in the query, as A2A allows.
    stream = new EventSource(`/tasks/${encodeURIComponent(task.id)}:subscribe?A2A-Version=1.0`);
    stream.onmessage = (event) => {
      let item;
      try {
        item = JSON.parse(event.data);
      } catch {
        return;
      }
      if (item.result) item = item.result;
      if (item.task) task = item.task;
      if (item.statusUpdate) task.status = item.statusUpdate.status;
      if (item.artifactUpdate) {
        const update = item.artifactUpdate;
        const list = task.artifacts || (task.artifacts = []);
        const known = list.find((a) => a.artifactId === update.artifact.artifactId);
        if (known && update.append) known.parts = (known.parts || []).concat(update.artifact.parts || []);
        else if (known) Object.assign(known, update.artifact);
        else list.push(update.artifact);
      }
      renderHead();
      loadLog().catch(() => {});
      if (FINAL.has(task.status.state) || WAITS.has(task.status.state)) {
        stream.close();
        stream = null;
        refresh().catch(() => {});
      }
    };
    stream.onerror = () => {
      // The stream ends when the task stops running: read what it came to (a moment later,
      // so that a node that refuses the stream is not asked again and again at once).
      stream.close();
      stream = null;
      setTimeout(() => closed || refresh().catch(() => {}), 1000);
    };
  };
  let closed = false;
  app.cleanup.push(() => {
    closed = true;
    if (stream) stream.close();
  });
  listen((summary) => {
    if (summary && summary.id === task.id && summary.state !== task.status.state) refresh().catch(() => {});
  });

  show(header, actions, h('h2', {}, 'Artifacts'), artifacts, h('h2', {}, 'Delegations'), children, h('h2', {}, 'Timeline'), timeline, h('h2', {}, 'Messages'), history);
  renderHead();
  await loadLog();
  watch();
}

async function sendView(role) {
  const params = new URLSearchParams(location.hash.split('?')[1] || '');
  const roleName = (role || '').split('?')[0];
  const select = h('select', { id: 'send-role' }, app.roles.map((r) => h('option', { value: r.name, selected: r.name === roleName }, r.name)));
  const context = h('input', { id: 'send-context', placeholder: 'context id (optional: continue a conversation)', value: params.get('context') || '', size: 48 });
  const text = h('textarea', { id: 'send-text', placeholder: 'What should the role do?' });
  const problem = h('p', { class: 'error' });
  const form = h(
    'form',
    {
      id: 'send',
      class: 'card',
      onsubmit: async (event) => {
        event.preventDefault();
        const message = { messageId: crypto.randomUUID(), role: 'ROLE_USER', parts: [{ text: text.value }] };
        if (context.value.trim()) message.contextId = context.value.trim();
        try {
          const sent = await call('POST', `${base(select.value)}/message:send`, { message, configuration: { returnImmediately: true } });
          if (sent.task) location.hash = `#/task/${encodeURIComponent(sent.task.id)}`;
          else problem.textContent = `The role answered with a message: ${textOf(sent.message)}`;
        } catch (error) {
          problem.textContent = error.message;
        }
      },
    },
    h('div', { class: 'row' }, 'Role', select, context),
    text,
    h('button', { class: 'primary', type: 'submit' }, 'Send'),
    problem,
  );
  show(h('h1', {}, 'Send a message'), form);
}

async function rolesView() {
  const { agents } = await call('GET', '/agents');
  app.roles = agents || [];
  const node = await call('GET', '/ui/api/node');
  const checks = node.signatures || {};
  const signed = (card) => {
    const reports = checks[card.name] || [];
    if (!reports.length) return 'not signed';
    const bad = reports.filter((r) => !r.ok);
    return bad.length
      ? h('span', { class: 'error signature', 'data-verified': 'no' }, `does not verify: ${bad.map((r) => r.error).join('; ')}`)
      : h('span', { class: 'signature', 'data-verified': 'yes' }, `verified with the node's key ${reports.map((r) => r.kid).join(', ')}`);
  };
  show(
    h('h1', {}, 'Roles'),
    app.roles.map((card) =>
      h(
        'div',
        { class: 'card', 'data-role': card.name },
        h('strong', {}, card.name),
        ' ',
        h('span', { class: 'muted' }, card.version || ''),
        h('p', {}, card.description || ''),
        grid({ class: 'grid' },
          'interfaces', h('span', {}, (card.supportedInterfaces || []).map((i) => `${i.protocolBinding} ${i.url}`).join(' · ')),
          'skills', h('span', {}, (card.skills || []).map((s) => s.name).join(', ') || '—'),
          'streaming', card.capabilities && card.capabilities.streaming ? 'yes' : 'no',
          'signature', signed(card),
        ),
        h('p', {}, h('a', { href: `#/send/${encodeURIComponent(card.name)}` }, 'Send a message'), ' · ', h('a', { href: `#/tasks?role=${encodeURIComponent(card.name)}` }, 'Tasks'), ' · ', link(`${base(card.name)}/.well-known/agent-card.json`, 'card')),
      ),
    ),
  );
}

async function nodeView() {
  const node = await call('GET', '/ui/api/node');
  const table = (id, heads, rows) => (rows.length ? h('table', { id }, h('thead', {}, h('tr', {}, heads.map((t) => h('th', {}, t)))), h('tbody', {}, rows.map((r) => h('tr', {}, r.map((c) => h('td', {}, c)))))) : h('p', { class: 'muted', id }, 'None.'));
  const peers = Array.isArray(node.peers) ? node.peers : [];
  show(
    h('h1', {}, node.name || 'Node'),
    grid({ class: 'grid card' }, 'url', node.url || '', 'roles', (node.roles || []).join(', ')),
    h('h2', {}, 'Peers'),
    table('peers', ['Name', 'URL', 'State', 'Roles', 'Last error'], peers.map((p) => [p.name, p.url, p.state === 'ok' ? 'reachable' : h('span', { class: 'error' }, p.state), (p.roles || []).map((r) => r.name).join(', '), p.error || ''])),
    h('h2', {}, 'MCP servers'),
    table('mcp', ['Name', 'Transport', 'State', 'Tools', 'Restarts', 'Last error'], (node.mcp || []).map((s) => [s.name, s.transport, s.state, String(s.tools), String(s.restarts), s.last_error || ''])),
    h('h2', {}, 'Skills'),
    table('skills', ['Name', 'Description', 'Path'], (node.skills || []).map((s) => [s.name, s.description, h('span', { class: 'mono' }, s.path)])),
    h('h2', {}, 'Hooks'),
    table('hooks', ['Name', 'Event', 'Scope', 'File'], (node.hooks || []).map((r) => [r.name, r.event, r.scope, h('span', { class: 'mono' }, r.file)])),
    (node.hook_problems || []).length ? h('div', { class: 'card' }, h('strong', {}, 'Hooks not run'), h('ul', { id: 'hook-problems' }, node.hook_problems.map((p) => h('li', {}, typeof p === 'string' ? p : `${p.path}${p.rule ? ` (${p.rule})` : ''}: ${p.message}`)))) : null,
    h('h2', {}, 'Replicas'),
    table('replicas', ['Id', 'Address', 'Alive', 'Running', 'Heartbeat'], (Array.isArray(node.replicas) ? node.replicas : []).map((r) => [r.id, r.address, r.alive ? 'yes' : 'no', String(r.running), when(r.heartbeat)])),
    (node.problems || []).length ? h('div', { class: 'card' }, h('strong', {}, 'Problems'), h('ul', {}, node.problems.map((p) => h('li', {}, typeof p === 'string' ? p : JSON.stringify(p))))) : null,
  );
}

// ---- Start ----------------------------------------------------------------------------

async function start() {
  const who = document.getElementById('who');
  who.replaceChildren();
  if (app.session && app.session.principal) {
    who.append(h('span', { id: 'principal' }, app.session.principal), ' ', h('button', { id: 'signout', onclick: () => signOut().catch((e) => alert(e.message)) }, 'Sign out'));
  }
  try {
    const { agents } = await call('GET', '/agents');
    app.roles = agents || [];
    const status = await call('GET', '/status');
    if (status && status.name) document.getElementById('node-name').textContent = status.name;
  } catch (error) {
    if (error.message === 'unauthenticated') return;
  }
  startFeed();
  if (!window.routing) {
    window.addEventListener('hashchange', route);
    window.routing = true;
  }
  route();
}

async function boot() {
  app.session = await call('GET', '/ui/session');
  if (app.session.auth && !app.session.principal) {
    signIn();
    return;
  }
  await start();
}

boot().catch((error) => show(h('p', { class: 'error' }, `The dashboard could not start: ${error.message}`)));
