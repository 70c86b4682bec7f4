// cloister ui: the page. Plain JS, no framework, nothing fetched from elsewhere.
// SECURITY: names, hosts, paths and error texts come from guests. Everything is put into the
// page with textContent (el() below); innerHTML is never used. The CSP forbids inline script.
'use strict';

let csrf = '';
let live = null;  // the traffic view's EventSource

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === 'class') e.className = v;
    else if (k === 'onclick') e.addEventListener('click', v);
    else if (k === 'oninput') e.addEventListener('input', v);
    else if (k === 'onchange') e.addEventListener('change', v);
    else e.setAttribute(k, v);
  }
  for (const c of children) {
    if (c === null || c === undefined) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

function size(n) {
  if (n === undefined || n === null) return '-';
  const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : String(n)) + ' ' + u[i];
}

function plural(n, noun) { return n + ' ' + noun + (n === 1 ? '' : 's'); }

function time(ms) { return new Date(ms).toISOString().replace('.000', ''); }

function say(text, bad) {
  const s = document.getElementById('status');
  s.textContent = text;
  s.className = bad ? 'bad' : 'ok';
}

async function api(path, opts) {
  const r = await fetch(path, Object.assign({credentials: 'same-origin'}, opts || {}));
  let body = null;
  try { body = await r.json(); } catch (e) { body = null; }
  if (!r.ok) {
    const msg = body && body.error ? body.error + (body.hint ? ' (Hint: ' + body.hint + ')' : '')
                                   : 'HTTP ' + r.status;
    throw new Error(msg);
  }
  return body;
}

function show(...nodes) {
  const v = document.getElementById('view');
  v.replaceChildren(...nodes.filter(n => n !== null && n !== undefined));
}

// The CLI's confirmation, then the action. Resolves to true when the action ran.
function confirmBox(title, text, verb) {
  return new Promise(resolve => {
    const box = document.getElementById('confirm');
    document.getElementById('confirm-title').textContent = title;
    document.getElementById('confirm-text').textContent = text;
    const yes = document.getElementById('confirm-yes');
    const no = document.getElementById('confirm-no');
    yes.textContent = verb;
    box.hidden = false;
    const done = ok => { box.hidden = true; yes.onclick = null; no.onclick = null; resolve(ok); };
    yes.onclick = () => done(true);
    no.onclick = () => done(false);
  });
}

async function act(name, action, checkpoint) {
  try {
    let q = '/api/workspaces/' + encodeURIComponent(name) + '/confirm?action=' + action;
    if (checkpoint) q += '&checkpoint=' + encodeURIComponent(checkpoint);
    const c = await api(q);
    const body = {};
    if (checkpoint) body.checkpoint = checkpoint;
    if (c.destructive) {
      const ok = await confirmBox(action + ' ' + name + '?', c.text, action);
      if (!ok) { say(action + ' ' + name + ': cancelled'); return; }
      body.confirm = true;
    }
    say(action + ' ' + name + '...');
    const r = await api('/api/workspaces/' + encodeURIComponent(name) + '/actions/' + action, {
      method: 'POST',
      headers: {'Content-Type': 'application/json', 'X-CSRF-Token': csrf},
      body: JSON.stringify(body),
    });
    say(r.message || (action + ' ' + name + ': done'));
  } catch (e) {
    say(action + ' ' + name + ': ' + e.message, true);
  }
  route();
}

function actionButtons(name, actions) {
  return el('span', {class: 'actions'}, ...actions.map(a =>
    el('button', {type: 'button', 'data-action': a, class: ['reset', 'wipe-home', 'wipe', 'rm'].includes(a) ? 'danger' : '',
                  onclick: () => act(name, a)}, a)));
}

async function viewWorkspaces() {
  const list = await api('/api/workspaces');
  const rows = list.map(w => el('tr', {'data-name': w.name},
    el('td', {class: 'c-name'}, el('a', {href: '#/ws/' + encodeURIComponent(w.name)}, w.name)),
    el('td', {class: 'c-state state-' + w.state}, w.state),
    el('td', {class: 'c-image'}, w.image || '-'),
    el('td', {class: 'c-size'}, size(w.allocated_bytes)),
    el('td', {class: 'c-checkpoints'}, w.checkpoints === undefined ? '-' : w.checkpoints),
    el('td', {class: 'c-compromised'}, w.compromised
      ? el('span', {class: 'bad'}, 'COMPROMISED: fix with cloister wipe ' + w.name) : 'no'),
    el('td', {class: 'c-note'}, w.problem || w.hint || ''),
    el('td', {}, el('a', {href: '#/traffic/' + encodeURIComponent(w.name)}, 'traffic'), ' ',
       el('a', {href: '#/audit/' + encodeURIComponent(w.name)}, 'audit'), ' ',
       actionButtons(w.name, ['start', 'stop', 'suspend']))));
  show(el('h2', {}, 'Workspaces'),
       el('table', {id: 'workspaces'},
          el('thead', {}, el('tr', {}, ...['Name', 'State', 'Image', 'Allocated', 'Checkpoints',
                                          'Compromised', 'Note', ''].map(h => el('th', {}, h)))),
          el('tbody', {}, ...rows)),
       list.length ? null : el('p', {}, 'No workspaces yet: cloister create NAME'));
}

async function viewWorkspace(name) {
  const d = await api('/api/workspaces/' + encodeURIComponent(name));
  const c = d.config || {};
  const facts = [['State', d.state + (d.state_detail ? ' (' + d.state_detail + ')' : '') + (d.hint ? '; ' + d.hint : '')],
                 ['Image', (c.image && c.image.name) || '-'], ['Tool', c.tool || '-'],
                 ['Directory', d.directory], ['MAC', d.mac],
                 ['Disks', size(d.total_apparent_bytes) + ' apparent, ' + size(d.total_allocated_bytes) + ' allocated']];
  if (c.ports) facts.push(['Ports', JSON.stringify(c.ports)]);
  // The live forwards: an automatic one's host port is the host's pick, never the guest's number.
  (d.forwards || []).forEach(f => facts.push(['Published',
    (String(f.host_ip).includes(':') ? '[' + f.host_ip + ']' : f.host_ip) + ':' + f.host_port +
    ' -> guest port ' + f.guest_port + ' (' + f.origin + ')']));
  const layers = (d.layers || []).map(l => el('tr', {},
    el('td', {}, l.disk), el('td', {}, l.file), el('td', {}, l.role), el('td', {}, l.format),
    el('td', {}, size(l.apparent_bytes)), el('td', {}, size(l.allocated_bytes))));
  const cps = (d.checkpoints || []).map(k => el('tr', {'data-id': k.id},
    el('td', {}, k.id), el('td', {}, k.created), el('td', {}, k.automatic ? 'automatic' : 'manual'),
    el('td', {}, size(k.allocated_bytes)),
    el('td', {}, el('button', {type: 'button', class: 'danger', 'data-action': 'checkpoint-restore',
                               onclick: () => act(name, 'checkpoint-restore', k.id)}, 'restore'))));
  show(el('h2', {}, 'Workspace ', el('span', {id: 'ws-name'}, name)),
       d.compromised ? el('p', {class: 'banner bad', id: 'compromised'},
         'COMPROMISED: it will not start until wiped. Fix: cloister wipe ' + name) : null,
       el('dl', {class: 'facts'}, ...facts.flatMap(([k, v]) => [el('dt', {}, k), el('dd', {}, v)])),
       el('p', {}, actionButtons(name, ['start', 'stop', 'suspend', 'checkpoint-create', 'reset', 'wipe-home', 'wipe', 'rm'])),
       el('h3', {}, 'Disks'),
       el('table', {}, el('thead', {}, el('tr', {}, ...['Disk', 'File', 'Role', 'Format', 'Apparent', 'Allocated'].map(h => el('th', {}, h)))),
          el('tbody', {}, ...layers)),
       el('h3', {}, 'Checkpoints'),
       el('table', {id: 'checkpoints'}, el('thead', {}, el('tr', {}, ...['Id', 'Created', 'Kind', 'Allocated', ''].map(h => el('th', {}, h)))),
          el('tbody', {}, ...cps)),
       el('p', {}, el('a', {href: '#/traffic/' + encodeURIComponent(name)}, 'Traffic'), ' · ',
          el('a', {href: '#/audit/' + encodeURIComponent(name)}, 'Residue audit')));
}

function trafficRow(r) {
  const notes = [];
  if (r.swaps.length) notes.push('swapped ' + r.swaps.join(','));
  for (const l of r.leaks) notes.push('LEAK ' + l.credential + ' in ' + l.where + ' (' + l.action + ')');
  if (r.abort) notes.push('aborted (' + r.abort + ')' + (r.error ? ': ' + r.error : ''));
  else if (r.error) notes.push('refused: ' + r.error);
  else if (r.blocked) notes.push('refused');
  return el('tr', {class: r.aborted ? 'aborted' : r.refused ? 'refused' : '', 'data-host': r.host},
    el('td', {}, time(r.time)), el('td', {}, r.method), el('td', {class: 'c-host'}, r.host),
    el('td', {class: 'c-path'}, r.path), el('td', {class: 'c-status'}, r.status),
    el('td', {}, size(r.bytes_up) + ' / ' + size(r.bytes_down)),
    el('td', {class: 'c-notes'}, notes.join('; ')));
}

function matches(f, r) {
  if (f.host && !r.host.includes(f.host)) return false;
  if (f.method && r.method !== f.method) return false;
  if (f.status && String(Math.floor(r.status / 100)) + 'xx' !== f.status) return false;
  if (f.only === 'leaks' && !r.leaks.length) return false;
  if (f.only === 'refused' && !r.refused) return false;
  if (f.only === 'aborted' && !r.aborted) return false;
  if (f.only === 'swaps' && !r.swaps.length) return false;
  return true;
}

async function viewTraffic(name, f) {
  f = f || {host: '', method: '', status: '', only: ''};
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(f)) if (v) q.set(k, v);
  const data = await api('/api/workspaces/' + encodeURIComponent(name) + '/traffic?' + q.toString());
  const body = el('tbody', {}, ...data.records.map(trafficRow).reverse());
  const refilter = () => {
    viewTraffic(name, {host: host.value, method: method.value, status: status.value, only: only.value})
      .catch(e => say(e.message, true));
  };
  const host = el('input', {id: 'f-host', placeholder: 'host contains', value: f.host, onchange: refilter});
  const select = (id, opts, v) => {
    const s = el('select', {id, onchange: refilter}, ...opts.map(o => el('option', {value: o}, o || 'any')));
    s.value = v;
    return s;
  };
  const method = select('f-method', ['', 'GET', 'POST', 'PUT', 'PATCH', 'DELETE', 'CONNECT'], f.method);
  const status = select('f-status', ['', '2xx', '3xx', '4xx', '5xx'], f.status);
  const only = select('f-only', ['', 'leaks', 'refused', 'aborted', 'swaps'], f.only);
  const count = el('span', {id: 'traffic-count'}, plural(data.records.length, 'request'));
  show(el('h2', {}, 'Traffic of ', el('a', {href: '#/ws/' + encodeURIComponent(name)}, name),
          el('span', {class: 'live', id: 'live'}, ' live')),
       el('form', {class: 'filters', id: 'filters'}, 'Host ', host, ' Method ', method, ' Status ', status,
          ' Only ', only, ' ', count),
       el('table', {id: 'traffic'},
          el('thead', {}, el('tr', {}, ...['Time', 'Method', 'Host', 'Path', 'Status', 'Up / down', 'Swaps, leaks, refusals, aborts'].map(h => el('th', {}, h)))),
          body));
  document.getElementById('filters').addEventListener('submit', e => { e.preventDefault(); refilter(); });
  if (live) live.close();
  live = new EventSource('/api/workspaces/' + encodeURIComponent(name) + '/traffic/live?offset=' + data.offset);
  let n = data.records.length;
  live.onmessage = ev => {
    const r = JSON.parse(ev.data);
    if (!matches(f, r)) return;
    body.prepend(trafficRow(r));
    count.textContent = plural(++n, 'request');
  };
  live.onerror = () => document.getElementById('live') && (document.getElementById('live').textContent = ' (live: reconnecting)');
}

async function viewLeaks() {
  const rows = await api('/api/leaks');
  show(el('h2', {}, 'Leaks'),
       el('p', {}, 'Every request that carried a credential\'s placeholder to a host it does not belong to.'),
       el('table', {id: 'leaks'},
          el('thead', {}, el('tr', {}, ...['Time', 'Workspace', 'Credential', 'To host', 'Where', 'What happened next', 'Fix'].map(h => el('th', {}, h)))),
          el('tbody', {}, ...rows.map(l => el('tr', {'data-credential': l.credential},
            el('td', {}, time(l.time)),
            el('td', {}, el('a', {href: '#/ws/' + encodeURIComponent(l.workspace)}, l.workspace)),
            el('td', {class: 'c-credential'}, l.credential), el('td', {class: 'c-host'}, l.host),
            el('td', {}, l.where + ' (' + l.encoding + ')'), el('td', {class: 'c-next'}, l.next),
            el('td', {}, l.fix ? el('button', {type: 'button', class: 'danger', 'data-action': 'wipe',
                                               onclick: () => act(l.workspace, 'wipe')}, l.fix) : '-'))))),
       rows.length ? null : el('p', {id: 'no-leaks'}, 'No placeholder has left its scope.'));
}

const kinds = [['probe', 'written by the probe'], ['zero', 'zero'], ['base_image', 'base image'],
               ['earlier_probe', 'earlier probe'], ['foreign', 'FOREIGN'], ['unresolved', 'unresolved']];

function diskPicture(d) {
  const total = kinds.reduce((s, [k]) => s + (d.bytes[k] || 0), 0) || 1;
  const bar = el('div', {class: 'bar'});
  const legend = el('ul', {class: 'legend'});
  for (const [k, label] of kinds) {
    const n = d.bytes[k] || 0;
    const seg = el('div', {class: 'seg k-' + k, title: label + ': ' + size(n)});
    seg.style.width = (100 * n / total) + '%';
    bar.append(seg);
    legend.append(el('li', {}, el('span', {class: 'swatch k-' + k}), label + ': ' + size(n)));
  }
  // Where on the device the foreign regions are (the report lists the first few).
  const map = el('div', {class: 'devmap', title: 'device, ' + size(d.device_bytes)});
  for (const off of d.foreign_regions || []) {
    const m = el('div', {class: 'mark k-foreign'});
    m.style.left = (100 * off / (d.device_bytes || 1)) + '%';
    map.append(m);
  }
  const clean = (d.bytes.foreign || 0) === 0 && (d.bytes.unresolved || 0) === 0;
  return el('section', {class: 'disk', 'data-device': d.device},
    el('h3', {}, d.device + (d.mountpoint ? ' (' + d.mountpoint + ')' : '') + ': ',
       el('span', {class: clean ? 'ok' : 'bad'}, clean ? 'clean' : 'FOREIGN BYTES')),
    el('p', {}, 'Probed ' + d.probed_regions + ' of ' + d.free_regions + ' free 64 KiB regions' +
                (d.exhaustive ? ' (exhaustive)' : ' (sample)') + ' on a ' + size(d.device_bytes) + ' device.'),
    bar, legend, el('p', {class: 'small'}, 'Foreign regions on the device:'), map);
}

async function viewAudit(name) {
  const report = await api('/api/workspaces/' + encodeURIComponent(name) + '/audit');
  const run = el('button', {type: 'button', id: 'run-audit', onclick: async () => {
    say('auditing ' + name + ' (under a minute)...');
    try {
      await api('/api/workspaces/' + encodeURIComponent(name) + '/audit', {
        method: 'POST', headers: {'Content-Type': 'application/json', 'X-CSRF-Token': csrf}, body: '{}'});
      say('audit of ' + name + ' done');
    } catch (e) { say('audit of ' + name + ': ' + e.message, true); }
    route();
  }}, 'Run residue audit');
  show(el('h2', {}, 'Residue audit of ', el('a', {href: '#/ws/' + encodeURIComponent(name)}, name)),
       el('p', {}, 'Probes free 64 KiB regions of each disk from inside the running VM: zero, probe and base-image bytes are clean; anything else is foreign. ', run),
       report ? el('div', {id: 'audit'}, ...report.disks.map(diskPicture))
              : el('p', {id: 'no-audit'}, 'No audit run yet from this dashboard.'));
}

const grantLabels = {request: 'This request', '5m': '5 minutes', '1h': '1 hour',
                     vm: 'Until the VM stops', deny: 'Deny'};
let consentTimer = null;

async function answer(q, grant) {
  try {
    const r = await api('/api/workspaces/' + encodeURIComponent(q.workspace) + '/consent/' + q.id, {
      method: 'POST', headers: {'Content-Type': 'application/json', 'X-CSRF-Token': csrf},
      body: JSON.stringify({grant})});
    say(r.message);
  } catch (e) { say('consent: ' + e.message, true); }
  route();
}

// The consent view polls the broker's questions every second but re-renders only when they
// changed (a click on a grant button is never lost to a redraw).
let consentShown = null;

async function viewConsent(refresh) {
  clearTimeout(consentTimer);
  const pending = await api('/api/consent');
  if (location.hash !== '#/consent') return;  // navigated away meanwhile
  consentTimer = setTimeout(() => viewConsent(true).catch(e => say(e.message, true)), 1000);
  const key = JSON.stringify(pending);
  if (refresh && key === consentShown) return;
  consentShown = key;
  const cards = pending.map(q => el('section', {class: 'question', 'data-id': q.id, 'data-workspace': q.workspace},
    el('h3', {}, q.workspace + ' asks to use ', el('span', {class: 'c-cred'}, q.cred)),
    el('p', {class: 'c-request'}, q.kind === 'ssh' ? q.request + ' ' + q.fingerprint
                                                   : q.method + ' ' + q.host + q.path),
    el('p', {class: 'small'}, 'ask ' + q.ask + '; refused after ' + q.timeout_s + ' s without an answer'),
    el('div', {class: 'buttons-left'}, ...q.grants.map(g =>
      el('button', {type: 'button', 'data-grant': g, class: g === 'deny' ? 'danger' : '',
                    onclick: () => answer(q, g)}, grantLabels[g] || g)))));
  show(el('h2', {}, 'Consent'),
       el('p', {}, 'Credentials set to ask (cloister cred policy NAME CRED --ask once|always) wait here, and in `cloister approve NAME`, for a decision. No answer in time: refused.'),
       el('div', {id: 'consent'}, ...cards),
       pending.length ? null : el('p', {id: 'no-consent'}, 'Nothing is waiting for a decision.'));
}

async function route() {
  if (live && !location.hash.startsWith('#/traffic/')) { live.close(); live = null; }
  const h = decodeURIComponent(location.hash.replace(/^#/, '')) || '/';
  const parts = h.split('/');
  try {
    if (parts[1] === 'ws' && parts[2]) await viewWorkspace(parts[2]);
    else if (parts[1] === 'traffic' && parts[2]) await viewTraffic(parts[2]);
    else if (parts[1] === 'audit' && parts[2]) await viewAudit(parts[2]);
    else if (parts[1] === 'leaks') await viewLeaks();
    else if (parts[1] === 'consent') await viewConsent();
    else await viewWorkspaces();
    document.body.dataset.view = parts[1] || 'workspaces';
  } catch (e) {
    say(e.message, true);
  }
}

async function main() {
  try {
    csrf = (await api('/api/session')).csrf;
  } catch (e) {
    say('no session: open the URL that cloister ui printed', true);
    return;
  }
  // A new view starts with an empty status line: the last action's result belongs to the view
  // it was run from (a re-render of the same view keeps it).
  window.addEventListener('hashchange', () => { say(''); route(); });
  await route();
}

main();
