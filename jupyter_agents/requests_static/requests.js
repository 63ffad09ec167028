// The pending-requests page (/agents/requests): what each agent asks to run, and its
// answers, usable on a phone. The list is fetched again whenever the server says a
// session's requests changed (its events websocket); every 10 s only while that is down.
'use strict';

(function () {
  const body = document.body;
  const base = body.dataset.baseUrl || '/';
  const list = document.getElementById('requests');
  const state = document.getElementById('state');

  function xsrf() {
    const m = document.cookie.match('\\b_xsrf=([^;]*)\\b');
    return m ? decodeURIComponent(m[1]) : '';
  }

  async function call(method, path, data) {
    const init = {
      method,
      credentials: 'same-origin',
      headers: { 'X-XSRFToken': xsrf(), 'Content-Type': 'application/json' }
    };
    if (data !== undefined) {
      init.body = JSON.stringify(data);
    }
    const response = await fetch(base + path, init);
    const text = await response.text();
    let parsed = null;
    try {
      parsed = text ? JSON.parse(text) : null;
    } catch (e) {
      parsed = null;
    }
    if (!response.ok) {
      const why = (parsed && parsed.message) || response.statusText;
      throw new Error(why + ' (' + response.status + ')');
    }
    return parsed;
  }

  function el(tag, cls, text) {
    const node = document.createElement(tag);
    if (cls) {
      node.className = cls;
    }
    if (text !== undefined) {
      node.textContent = text;
    }
    return node;
  }

  function what(r) {
    const input = r.input || {};
    return r.command || input.file_path || input.notebook_path || input.url || input.path || input.pattern || input.query || '';
  }

  function say(text, isError) {
    state.textContent = text;
    state.className = isError ? 'state error' : 'state';
  }

  async function answer(card, r, decision, extra) {
    // the card's buttons are disabled, then the card goes: the focus moves to the line
    // that says how it was answered, from where Tab reaches the next card
    if (card.contains(document.activeElement)) {
      state.focus();
    }
    card.querySelectorAll('button, textarea').forEach(b => (b.disabled = true));
    try {
      await call('POST', 'api/agents/requests/' + r.id, Object.assign({ decision }, extra || {}));
      say(decision === 'allow' ? 'Allowed: ' + r.tool + ' in ' + r.name : 'Denied: ' + r.tool + ' in ' + r.name, false);
    } catch (e) {
      say('Not answered: ' + e.message, true);
    }
    refresh();
  }

  function card(r) {
    const box = el('li', 'request');
    box.dataset.requestId = r.id;
    const who = el('div', 'who', (r.title || ('terminal ' + r.name)) + ' · ' + r.kind);
    const head = el('div', 'head', 'asks to use ' + r.tool);
    box.append(who, head);
    const w = what(r);
    if (w) {
      box.append(el('pre', 'what', w));
    }
    if (r.description) {
      box.append(el('div', 'why', r.description));
    }
    const input = r.input || {};
    if (input.old_string !== undefined || input.new_string !== undefined) {
      const lines = (input.old_string || '').split('\n').map(l => '- ' + l)
        .concat((input.new_string || '').split('\n').map(l => '+ ' + l));
      box.append(el('pre', 'change', lines.join('\n')));
    }
    const actions = el('div', 'actions');
    const allow = el('button', 'allow', 'Allow');
    allow.dataset.action = 'allow';
    allow.onclick = () => answer(box, r, 'allow');
    actions.append(allow);
    (r.suggestions || []).forEach(s => {
      const b = el('button', 'always', s.label);
      b.dataset.action = 'always';
      b.onclick = () => answer(box, r, 'allow', { suggestion: s.index });
      actions.append(b);
    });
    const deny = el('button', 'deny', 'Deny…');
    deny.dataset.action = 'deny';
    deny.onclick = () => {
      if (box.querySelector('.denying')) {
        return;
      }
      const form = el('div', 'denying');
      const message = el('textarea');
      message.placeholder = 'What should the agent do instead? (optional)';
      message.maxLength = 2000;
      const send = el('button', 'deny', 'Deny');
      send.dataset.action = 'send-deny';
      send.onclick = () => {
        const text = message.value.trim();
        answer(box, r, 'deny', text ? { message: text } : undefined);
      };
      form.append(message, send);
      box.append(form);
      message.focus();
    };
    actions.append(deny);
    box.append(actions);
    if (r.falls_back_to_dialog) {
      box.append(el('div', 'note', 'Unanswered, its terminal asks at ' + new Date(r.until).toLocaleTimeString()));
    }
    return box;
  }

  let shown = '';
  async function refresh() {
    let requests;
    try {
      requests = await call('GET', 'api/agents/requests');
    } catch (e) {
      say('Cannot list the requests: ' + e.message, true);
      return;
    }
    const text = JSON.stringify(requests);
    if (text === shown) {
      return;
    }
    shown = text;
    list.replaceChildren(...requests.map(card));
    body.dataset.count = String(requests.length);
    document.title = (requests.length ? '(' + requests.length + ') ' : '') + 'Agent requests';
    if (!requests.length) {
      list.append(el('li', 'empty', 'No agent is asking anything now.'));
    }
  }

  let poll = 0;
  function follow() {
    const url = new URL(base + 'api/events/subscribe', window.location.href);
    url.protocol = url.protocol === 'https:' ? 'wss:' : 'ws:';
    const socket = new WebSocket(url.href);
    socket.onopen = () => {
      window.clearInterval(poll);
      poll = 0;
      refresh();
    };
    socket.onmessage = message => {
      let event = null;
      try {
        event = JSON.parse(message.data);
      } catch (e) {
        return;
      }
      if (event && typeof event.schema_id === 'string' && event.schema_id.indexOf('jupyter_agents/session') >= 0 &&
          (event.action === 'request' || event.action === 'status')) {
        refresh();
      }
    };
    socket.onclose = () => {
      if (!poll) {
        poll = window.setInterval(refresh, 10000);
      }
      window.setTimeout(follow, 5000);
    };
  }

  refresh();
  follow();
})();
