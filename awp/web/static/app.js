// awp web: the dashboard page. No build step, no dependencies, nothing loaded
// from elsewhere. Every piece of text that comes from an agent goes into the
// page through textContent (or setAttribute on attributes that cannot run
// code); nothing from data is ever parsed as markup.
'use strict';
(function () {
  // ------------------------------------------------------------------ state

  const S = {
    state: null,          // the latest State from /api/state or the event stream
    agents: new Map(),    // key -> agent
    skew: 0,              // server clock minus ours, in ms
    activity: [],         // activity items, oldest first
    actSeqs: new Set(),
    maxSeq: 0,
    route: { view: 'overview' },
    conv: null,           // the open conversation {peer, th, data, seqs}
    board: { topics: null, error: '' },  // the topics of /api/board, once loaded
    topic: null,          // the open topic {id, data, error, list}
    es: null,
    opened: false,
    down: '',
  };
  const ACTIVITY_KEEP = 2000;
  const FEED_ROWS = 500;
  const IDLE_MS = 10 * 60 * 1000;
  const RASTER = ['image/png', 'image/jpeg', 'image/gif', 'image/webp', 'image/avif'];
  const FINAL = ['done', 'failed', 'closed'];

  const $ = (id) => document.getElementById(id);
  const now = () => Date.now() + S.skew;

  // ------------------------------------------------------------------ DOM helpers

  function h(tag, props, ...kids) {
    const el = document.createElement(tag);
    setProps(el, props);
    addKids(el, kids);
    return el;
  }

  function setProps(el, props) {
    if (!props) return;
    for (const k of Object.keys(props)) {
      const v = props[k];
      if (v == null || v === false) continue;
      if (k === 'class') el.setAttribute('class', v);
      else if (k === 'text') el.textContent = String(v);
      else if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
      else el.setAttribute(k, v === true ? '' : String(v));
    }
  }

  function addKids(el, kids) {
    for (const kid of kids) {
      if (kid == null || kid === false) continue;
      if (Array.isArray(kid)) addKids(el, kid);
      else el.appendChild(typeof kid === 'object' ? kid : document.createTextNode(String(kid)));
    }
  }

  const SVGNS = 'http://www.w3.org/2000/svg';
  function s(tag, props, ...kids) {
    const el = document.createElementNS(SVGNS, tag);
    setProps(el, props);
    addKids(el, kids);
    return el;
  }

  function clear(el) { while (el.firstChild) el.removeChild(el.firstChild); }

  // A list whose rows are built once per key and rebuilt only when their
  // signature changes; rows are moved, not recreated, when the order changes.
  class Keyed {
    constructor(container, build, sig) {
      this.c = container; this.build = build; this.sig = sig; this.rows = new Map();
    }
    update(items, keyOf) {
      const seen = new Set();
      let prev = null;
      for (const it of items) {
        const k = keyOf(it);
        if (seen.has(k)) continue;
        seen.add(k);
        const sg = this.sig(it);
        let row = this.rows.get(k);
        if (!row) {
          row = { el: this.build(it), sig: sg };
          this.rows.set(k, row);
        } else if (row.sig !== sg) {
          const el = this.build(it);
          if (row.el.parentNode) row.el.parentNode.replaceChild(el, row.el);
          row.el = el; row.sig = sg;
        }
        const want = prev ? prev.nextSibling : this.c.firstChild;
        if (want !== row.el) this.c.insertBefore(row.el, want);
        prev = row.el;
      }
      for (const [k, row] of this.rows) {
        if (!seen.has(k)) { row.el.remove(); this.rows.delete(k); }
      }
    }
  }

  // ------------------------------------------------------------------ formatting

  function dur(ms) {
    const sec = Math.max(0, Math.round(ms / 1000));
    if (sec < 60) return sec + 's';
    const m = Math.floor(sec / 60);
    if (m < 60) return m + 'm';
    const hr = Math.floor(m / 60);
    if (hr < 48) return hr + 'h';
    return Math.floor(hr / 24) + 'd';
  }
  function ago(iso) {
    const t = iso ? Date.parse(iso) : NaN;
    return isNaN(t) ? '' : dur(now() - t);
  }
  function clock(iso) {
    const t = iso ? new Date(iso) : null;
    if (!t || isNaN(t)) return '';
    const p = (n) => String(n).padStart(2, '0');
    return p(t.getHours()) + ':' + p(t.getMinutes()) + ':' + p(t.getSeconds());
  }
  function size(n) {
    if (typeof n !== 'number' || n < 0) return '';
    if (n < 1024) return n + ' B';
    if (n < 1024 * 1024) return (n / 1024).toFixed(1) + ' KiB';
    if (n < 1024 * 1024 * 1024) return (n / 1048576).toFixed(1) + ' MiB';
    return (n / 1073741824).toFixed(1) + ' GiB';
  }
  const short = (key) => (key || '').replace(/^ed25519:/, '').slice(0, 10);
  function nameOf(key) {
    const a = S.agents.get(key);
    if (!a) return short(key);
    // Another key claims a look-alike name: show whose key this one is.
    return a.name ? (a.lookalike ? a.name + ' (' + a.short + ')' : a.name) : a.short;
  }
  const isSelf = (key) => S.state && key === S.state.self;
  const enc = encodeURIComponent;

  // ------------------------------------------------------------------ avatars

  // A "marble" drawn from the key's 32 bytes: same key, same picture, on
  // every host. The SVG holds only numbers derived from the key, and is used
  // as an image (data: URL), so it can never carry script or markup from data.
  const PALETTE = [
    '#0ea5e9', '#6366f1', '#8b5cf6', '#d946ef', '#ec4899', '#f43f5e', '#f97316', '#f59e0b',
    '#eab308', '#84cc16', '#22c55e', '#10b981', '#14b8a6', '#06b6d4', '#3b82f6', '#a855f7',
    '#fb7185', '#fda4af', '#fcd34d', '#86efac', '#5eead4', '#93c5fd', '#c4b5fd', '#1e293b',
  ];
  const avatarCache = new Map();

  function keyBytes(key) {
    const b64 = (key || '').replace(/^ed25519:/, '').replace(/-/g, '+').replace(/_/g, '/');
    let bin = '';
    try { bin = atob(b64 + '==='.slice((b64.length + 3) % 4)); } catch (e) { bin = ''; }
    const out = new Uint8Array(32);
    if (bin.length >= 32) {
      for (let i = 0; i < 32; i++) out[i] = bin.charCodeAt(i);
    } else {
      // Not a key we can decode: fall back to a stable hash of the text.
      let x = 2166136261;
      for (let i = 0; i < 32; i++) {
        x ^= (key || '').charCodeAt(i % Math.max(1, (key || '').length)) + i;
        x = Math.imul(x, 16777619) >>> 0;
        out[i] = x & 255;
      }
    }
    return out;
  }

  function avatarURL(key) {
    let url = avatarCache.get(key);
    if (url) return url;
    const b = keyBytes(key);
    const pick = (i, avoid) => {
      let c = PALETTE[b[i] % PALETTE.length];
      let j = 1;
      while (avoid.includes(c)) c = PALETTE[(b[i] + j++) % PALETTE.length];
      return c;
    };
    const c0 = pick(0, []);
    const c1 = pick(1, [c0]);
    const c2 = pick(2, [c0, c1]);
    const c3 = pick(3, [c0, c1, c2]);
    const n = (i, lo, hi) => (lo + (b[i] / 255) * (hi - lo)).toFixed(1);
    const blob = (i) => {
      // A closed smooth shape through 5 points around a center.
      const cx = +n(i, 10, 70), cy = +n(i + 1, 10, 70), r = +n(i + 2, 18, 40);
      const pts = [];
      for (let k = 0; k < 5; k++) {
        const ang = (k / 5) * Math.PI * 2 + b[i + 3] / 40;
        const rr = r * (0.6 + (b[i + 4 + k] / 255) * 0.7);
        pts.push([cx + Math.cos(ang) * rr, cy + Math.sin(ang) * rr]);
      }
      let d = '';
      for (let k = 0; k < 5; k++) {
        const p0 = pts[k], p1 = pts[(k + 1) % 5];
        const mx = ((p0[0] + p1[0]) / 2).toFixed(1), my = ((p0[1] + p1[1]) / 2).toFixed(1);
        d += (k === 0 ? 'M' + mx + ' ' + my : '') ;
        const p2 = pts[(k + 2) % 5];
        const nx = ((p1[0] + p2[0]) / 2).toFixed(1), ny = ((p1[1] + p2[1]) / 2).toFixed(1);
        d += 'Q' + p1[0].toFixed(1) + ' ' + p1[1].toFixed(1) + ' ' + nx + ' ' + ny;
      }
      return d + 'Z';
    };
    const svg =
      '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 80 80" width="80" height="80">' +
      '<defs><clipPath id="c"><circle cx="40" cy="40" r="40"/></clipPath>' +
      '<filter id="f" x="-50%" y="-50%" width="200%" height="200%"><feGaussianBlur stdDeviation="' +
      n(20, 4, 8) + '"/></filter></defs>' +
      '<g clip-path="url(#c)"><rect width="80" height="80" fill="' + c0 + '"/>' +
      '<g filter="url(#f)">' +
      '<path d="' + blob(4) + '" fill="' + c1 + '"/>' +
      '<path d="' + blob(12) + '" fill="' + c2 + '" opacity="0.85"/>' +
      '<circle cx="' + n(21, 15, 65) + '" cy="' + n(22, 15, 65) + '" r="' + n(23, 6, 16) +
      '" fill="' + c3 + '" opacity="0.9"/></g></g></svg>';
    url = 'data:image/svg+xml,' + encodeURIComponent(svg);
    avatarCache.set(key, url);
    return url;
  }

  function avatar(key, px, cls) {
    return h('img', { class: 'avatar' + (cls ? ' ' + cls : ''), src: avatarURL(key), alt: '',
      width: px, height: px, title: key, draggable: 'false' });
  }

  const HARNESS = {
    claude: ['Claude Code', 'C'], codex: ['Codex', 'Cx'], cursor: ['Cursor', 'Cu'],
    gemini: ['Gemini CLI', 'G'], copilot: ['Copilot CLI', 'Co'], grok: ['grok', 'X'],
    opencode: ['opencode', 'oc'], pi: ['pi', 'π'],
  };
  function harnessBadge(id) {
    if (!id || !HARNESS[id]) return null;
    return h('span', { class: 'harness hx-' + id, title: HARNESS[id][0] }, HARNESS[id][1]);
  }

  const STATUS_TEXT = { self: 'this host', connected: 'connected', online: 'online',
    stale: 'stale', board: 'on the board', offline: 'offline' };
  function statusPill(a) {
    return h('span', { class: 'status st-' + a.status, title: a.status },
      STATUS_TEXT[a.status] || a.status);
  }
  function statePill(word) {
    const w = word || 'open';
    return h('span', { class: 'state s-' + (/^[a-z]+$/.test(w) ? w : 'other') }, w);
  }

  // "active 2m ago", "waiting for a message", or the amber "no activity 12m".
  function activitySignal(a) {
    const last = a.last_active ? Date.parse(a.last_active) : 0;
    if (a.listening) return { text: 'waiting for a message', cls: 'sig-waiting' };
    if (a.working && last && now() - last >= IDLE_MS) {
      return { text: 'no activity ' + dur(now() - last), cls: 'sig-idle' };
    }
    if (last) return { text: 'active ' + dur(now() - last) + ' ago',
      cls: now() - last < 5 * 60 * 1000 ? 'sig-recent' : '' };
    return { text: '', cls: '' };
  }

  function linkText(a) {
    if (a.status === 'self') return '';
    if (a.direct) {
      const rtt = typeof a.rtt_ms === 'number' ? Math.max(1, Math.round(a.rtt_ms)) + ' ms' : '';
      return [a.transport || 'connected', rtt].filter(Boolean).join(' · ');
    }
    if (a.unreachable) return "can't reach: " + a.unreachable;
    return '';
  }

  function chip(text, title) {
    return h('button', { class: 'chip', type: 'button', title: title || 'click to copy',
      onclick: (ev) => { ev.stopPropagation(); ev.preventDefault(); copy(text, ev.currentTarget); } },
    text);
  }

  function copy(text, el) {
    const done = () => {
      if (!el) return;
      el.classList.add('copied');
      setTimeout(() => el.classList.remove('copied'), 900);
    };
    try {
      if (navigator.clipboard && navigator.clipboard.writeText) {
        navigator.clipboard.writeText(text).then(done, () => {});
      }
    } catch (e) { /* no clipboard here */ }
  }

  function agentName(key, withAvatar) {
    const a = S.agents.get(key);
    const label = nameOf(key) + (isSelf(key) ? ' (this host)' : '');
    return h('a', { class: 'who', href: '#/agent/' + enc(key), title: key,
      onclick: (ev) => ev.stopPropagation() },
    withAvatar ? avatar(key, 18) : null, label, a && a.status !== 'self' && a.status !== 'connected'
      && a.status !== 'online' ? h('span', { class: 'dim' }, ' · ' + a.status) : null);
  }

  function shareIcon() {
    return s('svg', { class: 'icon', viewBox: '0 0 16 16', width: 13, height: 13, 'aria-hidden': 'true' },
      s('circle', { cx: 12, cy: 3.5, r: 2.2 }), s('circle', { cx: 4, cy: 8, r: 2.2 }),
      s('circle', { cx: 12, cy: 12.5, r: 2.2 }),
      s('path', { d: 'M5.9 7L10.1 4.6M5.9 9L10.1 11.4', fill: 'none', 'stroke-width': 1.5 }));
  }

  // ------------------------------------------------------------------ routing

  function parseRoute() {
    const raw = location.hash.replace(/^#\/?/, '');
    const [path, query] = raw.split('?');
    const parts = path.split('/').filter(Boolean).map((p) => { try { return decodeURIComponent(p); } catch (e) { return p; } });
    const q = new URLSearchParams(query || '');
    const r = { view: 'overview', q };
    if (parts[0] === 'network') r.view = 'network';
    else if (parts[0] === 'threads') r.view = 'threads';
    else if (parts[0] === 'agents') r.view = 'agents';
    else if (parts[0] === 'activity') r.view = 'activity';
    else if (parts[0] === 'agent' && parts[1]) { r.view = 'agent'; r.key = parts[1]; }
    else if (parts[0] === 'thread' && parts[1] && parts[2]) {
      r.view = 'thread'; r.peer = parts[1]; r.th = parts[2];
    }
    else if (parts[0] === 'board') r.view = 'board';
    else if (parts[0] === 'topic' && parts[1]) { r.view = 'topic'; r.topic = parts[1]; }
    return r;
  }

  function onRoute() {
    S.route = parseRoute();
    for (const sec of document.querySelectorAll('.view')) sec.hidden = true;
    $('view-' + S.route.view).hidden = false;
    const navView = { agent: 'agents', thread: 'threads', topic: 'board' }[S.route.view] || S.route.view;
    for (const a of document.querySelectorAll('#nav a')) {
      a.classList.toggle('active', a.dataset.view === navView);
    }
    if (S.route.view === 'threads') {
      $('thread-filter').value = S.route.q.get('q') || '';
      $('thread-open').checked = S.route.q.get('open') === '1';
      $('thread-scope').value = S.route.q.get('scope') || '';
    }
    if (S.route.view === 'activity') $('activity-kind').value = S.route.q.get('kind') || '';
    if (S.route.view === 'thread') openConversation(S.route.peer, S.route.th);
    else S.conv = null;
    if (S.route.view === 'board') loadBoard();
    if (S.route.view === 'topic') openTopic(S.route.topic);
    else S.topic = null;
    window.scrollTo(0, 0);
    schedule();
  }

  function setQuery(view, params) {
    const q = new URLSearchParams();
    for (const k of Object.keys(params)) if (params[k]) q.set(k, params[k]);
    const qs = q.toString();
    history.replaceState(null, '', '#/' + view + (qs ? '?' + qs : ''));
    S.route.q = q;
    schedule();
  }

  // ------------------------------------------------------------------ rendering

  let pending = false;
  function schedule() {
    if (pending) return;
    pending = true;
    requestAnimationFrame(() => { pending = false; render(); });
  }

  function render() {
    renderChrome();
    if (!S.state) return;
    const v = S.route.view;
    if (v === 'overview') renderOverview();
    else if (v === 'network') renderNetwork();
    else if (v === 'threads') renderThreads();
    else if (v === 'agents') renderAgents();
    else if (v === 'agent') renderAgent();
    else if (v === 'activity') renderActivity();
    else if (v === 'thread') renderConversationHead();
    else if (v === 'board') renderBoard();
    else if (v === 'topic') renderTopic();
  }

  function renderChrome() {
    const banner = $('banner');
    if (S.down) {
      banner.hidden = false;
      banner.textContent = 'Waiting for the awp daemon: ' + S.down +
        '. Start it with awp up; this page picks it up by itself.';
    } else {
      banner.hidden = true;
    }
    const st = S.state;
    $('host').textContent = st ? (st.name || '') + (st.host_name ? ' @ ' + st.host_name : '') : '';
  }

  // -- overview

  const statsOrder = [['agents', 'agents'], ['up', 'up'], ['threads', 'threads'],
    ['active', 'active'], ['working', 'working'], ['waiting', 'waiting']];
  let overviewOpen = null, overviewRecent = null, overviewAttention = null;

  function renderOverview() {
    const st = S.state;
    const stats = $('stats');
    clear(stats);
    for (const [k, label] of statsOrder) {
      stats.appendChild(h('div', { class: 'stat' }, h('b', { text: String(st.stats[k] ?? 0) }),
        h('span', { text: label })));
    }
    const card = $('self-card');
    clear(card);
    card.appendChild(hostCard());

    if (!overviewOpen) {
      overviewOpen = new Keyed($('open-threads'), threadRow, threadSig);
      overviewRecent = new Keyed($('recent'), activityRow, activitySig);
      overviewAttention = new Keyed($('attention'), attentionRow, attentionSig);
    }
    const open = st.threads.filter((t) => !FINAL.includes(t.a_state) && !FINAL.includes(t.b_state));
    overviewOpen.update(open.slice(0, 12), (t) => t.id);
    $('open-empty').hidden = open.length > 0;
    const recent = S.activity.slice(-15).reverse();
    overviewRecent.update(recent, (a) => a.seq);
    const attention = st.agents.filter((a) => {
      const sig = activitySignal(a);
      return sig.cls === 'sig-idle' || (!a.direct && a.unreachable) || a.status === 'stale';
    });
    overviewAttention.update(attention.slice(0, 20), (a) => a.key);
    $('attention-empty').hidden = attention.length > 0;
    $('recent-empty').hidden = recent.length > 0;
  }

  function hostCard() {
    const st = S.state;
    const me = S.agents.get(st.self) || { key: st.self, name: st.name, short: short(st.self) };
    const cmd = st.address ? 'awp connect ' + st.address : '';
    const listeners = (st.listeners || []).join(', ');
    return h('div', { class: 'card host-card' },
      h('div', { class: 'card-head' }, avatar(st.self, 44),
        h('div', null, h('div', { class: 'name' }, me.name || short(st.self)),
          h('div', { class: 'muted' }, chip(short(st.self), 'copy the key: ' + st.self),
            ' ', st.host_name || '', ' · awp ', st.version || ''))),
      h('div', { class: 'kv' },
        h('span', { class: 'k' }, 'share'),
        cmd ? h('span', { class: 'connect' }, h('code', { text: cmd }),
          h('button', { class: 'copy', type: 'button', onclick: (ev) => copy(cmd, ev.currentTarget) }, 'copy'))
          : h('span', { class: 'muted' }, 'no address yet')),
      h('div', { class: 'kv' }, h('span', { class: 'k' }, 'listening'),
        h('span', { text: listeners || 'nothing' })),
      st.tailcat_error ? h('div', { class: 'kv error' }, h('span', { class: 'k' }, 'tailcat'),
        h('span', { text: st.tailcat_error })) : null,
      h('div', { class: 'kv' }, h('span', { class: 'k' }, 'presence'),
        h('span', { text: st.presence ? 'published' : 'not published (awp up --presence)' })),
      (st.shares || []).length ? h('div', { class: 'kv' }, h('span', { class: 'k' }, 'shares with'),
        h('span', null, st.shares.map((k, i) => [i ? ', ' : '', agentName(k)]))) : null,
      h('div', { class: 'kv' }, h('span', { class: 'k' }, 'inbox'),
        h('span', { text: (st.counts.unread || 0) + ' unread, ' + (st.counts.notices || 0) +
          ' notices, ' + (st.counts.queued || 0) + ' queued' })));
  }

  function attentionSig(a) {
    return [a.key, a.name, a.status, activitySignal(a).text, a.unreachable].join('|');
  }
  function attentionRow(a) {
    const sig = activitySignal(a);
    let why = '';
    if (sig.cls === 'sig-idle') why = sig.text;
    else if (!a.direct && a.unreachable) why = "can't reach: " + a.unreachable;
    else if (a.status === 'stale') why = 'no heartbeat for ' + ago(a.seen);
    return h('a', { class: 'row', href: '#/agent/' + enc(a.key) }, avatar(a.key, 22),
      h('span', { class: 'name', text: nameOf(a.key) }), statusPill(a),
      h('span', { class: sig.cls === 'sig-idle' ? 'sig-idle' : 'muted', text: why }));
  }

  // -- threads

  function threadSig(t) {
    return [t.id, t.subject, t.a_state, t.b_state, t.a_note || '', t.b_note || '', t.unread || 0,
      t.shared_by, ago(t.updated), nameOf(t.a), nameOf(t.b)].join('|');
  }

  function threadLink(t) {
    if (t.local) return '#/thread/' + enc(t.peer) + '/' + enc(t.th);
    if (t.shared_by) return '#/thread/' + enc(t.shared_by) + '/' + enc(t.th);
    return '';
  }

  function threadRow(t) {
    const link = threadLink(t);
    const side = (key, state, note) => h('span', { class: 'side' }, agentName(key, true), ' ',
      statePill(state), note ? h('span', { class: 'note', text: note, title: note }) : null);
    return h('div', { class: 'row thread' + (link ? ' clickable' : ' closed-conv'),
      title: link ? 'open the conversation' : 'messages are private to the two agents',
      onclick: link ? () => { location.hash = link; } : null },
    chip(t.th, 'copy the thread id'),
    h('span', { class: 'subject', text: t.subject || '(no subject)' }),
    h('span', { class: 'sides' }, side(t.a, t.a_state, t.a_note), h('span', { class: 'arrow' }, '⇄'),
      side(t.b, t.b_state, t.b_note)),
    t.shared_by ? h('span', { class: 'shared', title: 'shared with this host' }, shareIcon(),
      ' Shared by ', nameOf(t.shared_by)) : null,
    t.unread ? h('span', { class: 'unread', title: 'unread' }, String(t.unread)) : null,
    h('span', { class: 'when', text: ago(t.updated), title: t.updated || '' }));
  }

  let threadList = null;
  function renderThreads() {
    if (!threadList) threadList = new Keyed($('thread-list'), threadRow, threadSig);
    const q = (S.route.q.get('q') || '').toLowerCase();
    const openOnly = S.route.q.get('open') === '1';
    const scope = S.route.q.get('scope') || '';
    const items = S.state.threads.filter((t) => {
      if (openOnly && (FINAL.includes(t.a_state) || FINAL.includes(t.b_state))) return false;
      if (scope === 'local' && !t.local) return false;
      if (scope === 'shared' && !t.shared_by) return false;
      if (scope === 'gossip' && (t.local || t.shared_by)) return false;
      if (q) {
        const hay = (t.subject + ' ' + t.th + ' ' + nameOf(t.a) + ' ' + nameOf(t.b)).toLowerCase();
        if (!hay.includes(q)) return false;
      }
      return true;
    });
    threadList.update(items, (t) => t.id);
    $('thread-count').textContent = items.length + ' of ' + S.state.threads.length;
    $('thread-empty').hidden = items.length > 0;
  }

  // -- agents

  function agentSig(a) {
    return [a.key, a.name, a.status, a.harness, a.model, a.host, a.about, activitySignal(a).text,
      linkText(a), a.threads, a.working, a.sharing, a.version, identityText(a),
      a.identity_warning].join('|');
  }

  // Verified, rotated, certified: what `awp peers` says of the peer's identity.
  function identityText(a) {
    const bits = [];
    if (a.verified === 'verified') bits.push('verified');
    else if (a.verified === 'carried') bits.push('verified (carried over a rotation)');
    if ((a.rotated_from || []).length) bits.push('rotated ' + a.rotated_from.length + 'x');
    if (a.operator) bits.push('operator ' + (a.operator.name || a.operator.op.slice(8, 18)) +
      ' (' + a.operator.status + ')');
    return bits.join(' · ');
  }

  function agentCard(a) {
    const sig = activitySignal(a);
    const lt = linkText(a);
    return h('a', { class: 'card agent st-' + a.status, href: '#/agent/' + enc(a.key) },
      h('div', { class: 'card-head' }, avatar(a.key, 40),
        h('div', { class: 'ident' },
          h('div', { class: 'name' }, h('span', { text: a.name }), ' ', harnessBadge(a.harness)),
          h('div', { class: 'muted mono', text: a.short }))),
      h('div', { class: 'meta' }, statusPill(a),
        a.model ? h('span', { class: 'model', text: a.model }) : null,
        a.host ? h('span', { class: 'muted', text: a.host }) : null),
      sig.text ? h('div', { class: 'signal ' + sig.cls, text: sig.text }) : null,
      lt ? h('div', { class: 'link' + (a.direct ? '' : ' error'), text: lt }) : null,
      a.about ? h('div', { class: 'about', text: a.about }) : null,
      identityText(a) ? h('div', { class: 'muted small identity', text: identityText(a) }) : null,
      a.identity_warning ? h('div', { class: 'signal error', text: 'WARNING: ' + a.identity_warning })
        : null,
      h('div', { class: 'muted small', text: a.threads + (a.threads === 1 ? ' thread' : ' threads') +
        (a.working ? ' · working' : '') + (a.sharing ? '' : ' · no presence') }));
  }

  let agentGrid = null;
  function renderAgents() {
    if (!agentGrid) agentGrid = new Keyed($('agent-grid'), agentCard, agentSig);
    agentGrid.update(S.state.agents, (a) => a.key);
    $('agent-count').textContent = S.state.stats.agents + ' agents, ' + S.state.stats.up + ' up';
  }

  let agentThreads = null, agentThreadsKey = '';
  function renderAgent() {
    const key = S.route.key;
    const box = $('agent-detail');
    const a = S.agents.get(key);
    if (agentThreadsKey !== key || !box.firstChild) {
      clear(box);
      agentThreadsKey = key;
      box.appendChild(h('div', { id: 'agent-card' }));
      box.appendChild(h('h2', null, 'Links'));
      box.appendChild(h('div', { id: 'agent-links', class: 'list' }));
      box.appendChild(h('h2', null, 'Threads'));
      box.appendChild(h('div', { id: 'agent-threads', class: 'list threads' }));
      agentThreads = new Keyed($('agent-threads'), threadRow, threadSig);
    }
    const cardBox = $('agent-card');
    clear(cardBox);
    if (!a) {
      cardBox.appendChild(h('p', { class: 'empty', text: 'This agent is not known to this host (' + key + ').' }));
      return;
    }
    const big = agentCard(a);
    big.classList.add('big');
    big.removeAttribute('href');
    cardBox.appendChild(big);
    cardBox.appendChild(h('div', { class: 'kv' }, h('span', { class: 'k' }, 'key'), chip(a.key, 'copy the key')));
    if (a.via) cardBox.appendChild(h('div', { class: 'kv' }, h('span', { class: 'k' }, 'presence via'),
      agentName(a.via), ' · ' + a.hops + (a.hops === 1 ? ' hop' : ' hops') + ', seen ' + ago(a.seen) + ' ago'));
    (a.rotated_from || []).forEach((k) => cardBox.appendChild(h('div', { class: 'kv' },
      h('span', { class: 'k' }, 'rotated from'), chip(k, 'copy the old key'))));
    if (a.operator) cardBox.appendChild(h('div', { class: 'kv' }, h('span', { class: 'k' }, 'operator'),
      chip(a.operator.op, 'copy the operator key'),
      ' ' + (a.operator.name ? a.operator.name + ', ' : '') + a.operator.status + ' until ' + a.operator.exp));
    if (a.heard) cardBox.appendChild(h('div', { class: 'kv' }, h('span', { class: 'k' }, 'name'),
      a.name + ' (heard of, from a ' + a.heard + '; never met)'));
    if (a.board) {
      const roles = { owner: 'owns', author: 'posts in', worker: 'works' };
      cardBox.appendChild(h('div', { class: 'kv' }, h('span', { class: 'k' }, 'on the board'),
        (a.board.roles || []).map((r) => roles[r] || r).join(', ') + ': ',
        (a.board.topics || []).map((t, i) => [i ? ', ' : '',
          h('a', { href: '#/topic/' + enc(t.id), text: t.label })]),
        a.board.via && a.board.via !== a.key ? [' · via ', agentName(a.board.via)] : null,
        a.board.last ? ' · last record ' + ago(a.board.last) + ' ago' : null));
    }
    if ((a.shares || []).length) cardBox.appendChild(h('div', { class: 'kv' },
      h('span', { class: 'k' }, 'shares with'), a.shares.map((k, i) => [i ? ', ' : '', agentName(k)])));
    if (a.status === 'self') cardBox.appendChild(hostCard());
    const links = $('agent-links');
    clear(links);
    for (const l of S.state.links) {
      if (l.a !== key && l.b !== key) continue;
      const other = l.a === key ? l.b : l.a;
      const label = l.up ? (typeof l.rtt_ms === 'number' ? Math.max(1, Math.round(l.rtt_ms)) + ' ms' : 'up')
        : (l.error ? "can't reach: " + l.error : 'down');
      links.appendChild(h('div', { class: 'row' }, agentName(other, true),
        l.transport ? h('span', { class: 'muted', text: l.transport }) : null,
        h('span', { class: l.up ? 'ok' : 'error', text: label })));
    }
    if (!links.firstChild) links.appendChild(h('p', { class: 'empty', text: 'No known links.' }));
    agentThreads.update(S.state.threads.filter((t) => t.a === key || t.b === key), (t) => t.id);
  }

  // -- activity

  const KIND_TEXT = { msg: 'message', state: 'state', thread: 'thread', joined: 'joined', left: 'left',
    connected: 'connected', disconnected: 'disconnected', blob: 'file', grant: 'grant',
    introduce: 'introduction', bye: 'bye', error: 'error', post: 'board post', queue: 'queue' };

  function activitySig(a) { return a.seq + '|' + nameOf(a.from) + '|' + nameOf(a.to); }

  function activityRow(a) {
    const link = a.th && a.peer ? '#/thread/' + enc(a.peer) + '/' + enc(a.th)
      : (a.topic ? '#/topic/' + enc(a.topic) : '');
    return h('div', { class: 'row act k-' + a.kind + (a.local ? '' : ' remote') + (link ? ' clickable' : ''),
      title: a.local ? null : 'learned from presence or a shared conversation',
      onclick: link ? () => { location.hash = link; } : null },
    h('span', { class: 'when', text: clock(a.at), title: a.at || '' }),
    h('span', { class: 'kind', text: KIND_TEXT[a.kind] || a.kind }),
    a.from ? agentName(a.from, true) : null,
    a.to ? h('span', { class: 'arrow' }, '→') : null,
    a.to ? agentName(a.to, false) : null,
    a.th ? chip(a.th, 'copy the thread id') : null,
    a.subject ? h('span', { class: 'subject', text: a.subject }) : null,
    a.state ? statePill(a.state) : null,
    a.text && a.text !== a.subject ? h('span', { class: 'text', text: a.text }) : null);
  }

  let feed = null;
  function renderActivity() {
    if (!feed) feed = new Keyed($('activity-list'), activityRow, activitySig);
    const kind = S.route.q.get('kind') || '';
    const out = [];
    for (let i = S.activity.length - 1; i >= 0 && out.length < FEED_ROWS; i--) {
      const a = S.activity[i];
      if (!kind || a.kind === kind) out.push(a);
    }
    feed.update(out, (a) => a.seq);
    $('activity-count').textContent = S.activity.length + ' items';
    $('activity-empty').hidden = out.length > 0;
  }

  function addActivity(item) {
    if (!item || typeof item.seq !== 'number' || S.actSeqs.has(item.seq)) return;
    S.actSeqs.add(item.seq);
    if (item.seq > S.maxSeq) {
      S.maxSeq = item.seq;
      S.activity.push(item);
    } else {
      let i = S.activity.length;
      while (i > 0 && S.activity[i - 1].seq > item.seq) i--;
      S.activity.splice(i, 0, item);
    }
    if (S.activity.length > ACTIVITY_KEEP) {
      const gone = S.activity.splice(0, S.activity.length - ACTIVITY_KEEP);
      for (const g of gone) S.actSeqs.delete(g.seq);
    }
  }

  function resetActivity() {
    S.activity = []; S.actSeqs = new Set(); S.maxSeq = 0;
  }

  // -- network graph

  const G = { pos: new Map(), topo: '', svg: null, links: null, nodes: null, linkEls: new Map(), nodeEls: new Map() };

  function hash01(key, i) { return keyBytes(key)[i] / 255; }

  function canvasSize(n) {
    const W = Math.max(1000, Math.round(Math.sqrt(Math.max(1, n)) * 190));
    return [W, Math.round(W * 0.68)];
  }

  // Fruchterman-Reingold, run when the set of agents or links changes. Known
  // agents keep their place, so the picture does not jump on every change.
  function layout(agents, links) {
    const self = S.state.self;
    const [W, H] = canvasSize(agents.length);
    const cx = W / 2, cy = H / 2;
    let fresh = 0;
    const nodes = agents.map((a) => {
      let p = G.pos.get(a.key);
      if (!p) {
        const ang = hash01(a.key, 5) * Math.PI * 2, r = (0.15 + hash01(a.key, 6) * 0.35) * Math.min(W, H);
        p = { x: cx + Math.cos(ang) * r, y: cy + Math.sin(ang) * r };
        G.pos.set(a.key, p);
        fresh++;
      }
      return { key: a.key, p };
    });
    const idx = new Map(nodes.map((n, i) => [n.key, i]));
    const edges = links.filter((l) => idx.has(l.a) && idx.has(l.b)).map((l) => [idx.get(l.a), idx.get(l.b)]);
    const n = nodes.length;
    const k = 0.8 * Math.sqrt((W * H) / Math.max(1, n));
    const rounds = fresh > n / 3 ? 320 : 120;
    let t = fresh > n / 3 ? W / 8 : W / 40;
    const cool = t / rounds;
    const sp = G.pos.get(self);
    if (sp) { sp.x = cx; sp.y = cy; }
    for (let it = 0; it < rounds; it++) {
      const dx = new Float64Array(n), dy = new Float64Array(n);
      for (let i = 0; i < n; i++) {
        const pi = nodes[i].p;
        for (let j = i + 1; j < n; j++) {
          const pj = nodes[j].p;
          let ddx = pi.x - pj.x, ddy = pi.y - pj.y;
          let d2 = ddx * ddx + ddy * ddy;
          if (d2 < 1) { ddx = (i - j) || 1; ddy = 1; d2 = ddx * ddx + 1; }
          const f = (k * k) / d2;
          dx[i] += ddx * f; dy[i] += ddy * f; dx[j] -= ddx * f; dy[j] -= ddy * f;
        }
      }
      for (const [i, j] of edges) {
        const ddx = nodes[i].p.x - nodes[j].p.x, ddy = nodes[i].p.y - nodes[j].p.y;
        const d = Math.sqrt(ddx * ddx + ddy * ddy) || 1;
        const f = d / k;
        dx[i] -= ddx * f; dy[i] -= ddy * f; dx[j] += ddx * f; dy[j] += ddy * f;
      }
      for (let i = 0; i < n; i++) {
        if (nodes[i].key === self) continue;
        dx[i] += (cx - nodes[i].p.x) * 1.2; dy[i] += (cy - nodes[i].p.y) * 1.2;
        const d = Math.sqrt(dx[i] * dx[i] + dy[i] * dy[i]) || 1;
        const step = Math.min(d, t);
        nodes[i].p.x += (dx[i] / d) * step;
        nodes[i].p.y += (dy[i] / d) * step;
      }
      t = Math.max(1, t - cool);
    }
    // Frame what is there, with room for the labels.
    let x0 = Infinity, y0 = Infinity, x1 = -Infinity, y1 = -Infinity;
    for (const nd of nodes) {
      x0 = Math.min(x0, nd.p.x); y0 = Math.min(y0, nd.p.y);
      x1 = Math.max(x1, nd.p.x); y1 = Math.max(y1, nd.p.y);
    }
    if (!n) { x0 = y0 = 0; x1 = W; y1 = H; }
    const padX = 110, padTop = 40, padBottom = 60;
    G.svg.setAttribute('viewBox', [Math.round(x0 - padX), Math.round(y0 - padTop),
      Math.round(Math.max(400, x1 - x0 + 2 * padX)), Math.round(Math.max(300, y1 - y0 + padTop + padBottom))].join(' '));
  }

  function renderNetwork() {
    const st = S.state;
    const box = $('graph');
    if (!G.svg) {
      G.svg = s('svg', { viewBox: '0 0 1000 700', class: 'net', role: 'img', 'aria-label': 'network graph' });
      G.links = s('g', { class: 'links' });
      G.nodes = s('g', { class: 'nodes' });
      G.svg.appendChild(G.links); G.svg.appendChild(G.nodes);
      box.appendChild(G.svg);
      const legend = $('net-legend');
      clear(legend);
      for (const stt of ['self', 'connected', 'online', 'stale', 'board', 'offline']) {
        legend.appendChild(h('span', { class: 'status st-' + stt }, STATUS_TEXT[stt]));
      }
    }
    const topo = st.agents.map((a) => a.key).join(',') + '#' + st.links.map((l) => l.a + '-' + l.b).join(',');
    if (topo !== G.topo) { layout(st.agents, st.links); G.topo = topo; }

    const seenL = new Set();
    for (const l of st.links) {
      const id = l.a + '|' + l.b;
      seenL.add(id);
      const pa = G.pos.get(l.a), pb = G.pos.get(l.b);
      if (!pa || !pb) continue;
      let el = G.linkEls.get(id);
      if (!el) {
        el = { g: s('g', { class: 'edge' }) };
        el.line = s('line', {}); el.label = s('text', { 'text-anchor': 'middle' });
        el.g.appendChild(el.line); el.g.appendChild(el.label);
        G.links.appendChild(el.g); G.linkEls.set(id, el);
      }
      el.line.setAttribute('x1', pa.x.toFixed(1)); el.line.setAttribute('y1', pa.y.toFixed(1));
      el.line.setAttribute('x2', pb.x.toFixed(1)); el.line.setAttribute('y2', pb.y.toFixed(1));
      el.g.setAttribute('class', 'edge' + (l.up ? ' up' : ' down') + (l.direct ? ' direct' : '') +
        (l.board ? ' board' : ''));
      let label = '';
      if (l.up && typeof l.rtt_ms === 'number') label = Math.max(1, Math.round(l.rtt_ms)) + ' ms';
      else if (!l.up && l.error) label = "can't reach";
      if (l.up && l.direct && l.transport) label = l.transport + (label ? ' · ' + label : '');
      el.label.textContent = label;
      el.label.setAttribute('x', ((pa.x + pb.x) / 2).toFixed(1));
      el.label.setAttribute('y', ((pa.y + pb.y) / 2 - 4).toFixed(1));
      if (l.error) {
        let tt = el.g.querySelector('title');
        if (!tt) { tt = s('title'); el.g.appendChild(tt); }
        tt.textContent = "can't reach: " + l.error;
      }
    }
    for (const [id, el] of G.linkEls) if (!seenL.has(id)) { el.g.remove(); G.linkEls.delete(id); }

    const seenN = new Set();
    for (const a of st.agents) {
      seenN.add(a.key);
      const p = G.pos.get(a.key);
      let el = G.nodeEls.get(a.key);
      if (!el) {
        el = { g: s('g', { class: 'node', tabindex: 0 }) };
        el.ring = s('circle', { r: 21 });
        el.img = s('image', { href: avatarURL(a.key), x: -18, y: -18, width: 36, height: 36 });
        el.name = s('text', { y: 34, 'text-anchor': 'middle', class: 'nname' });
        el.sig = s('text', { y: 47, 'text-anchor': 'middle', class: 'nsig' });
        el.title = s('title');
        el.g.appendChild(el.title); el.g.appendChild(el.ring); el.g.appendChild(el.img);
        el.g.appendChild(el.name); el.g.appendChild(el.sig);
        const key = a.key;
        el.g.addEventListener('click', () => { location.hash = '#/agent/' + enc(key); });
        el.g.addEventListener('keydown', (ev) => { if (ev.key === 'Enter') location.hash = '#/agent/' + enc(key); });
        G.nodes.appendChild(el.g); G.nodeEls.set(a.key, el);
      }
      el.g.setAttribute('transform', 'translate(' + p.x.toFixed(1) + ' ' + p.y.toFixed(1) + ')');
      el.g.setAttribute('class', 'node st-' + a.status);
      el.name.textContent = a.name + (a.harness && HARNESS[a.harness] ? ' · ' + HARNESS[a.harness][0] : '');
      const sig = activitySignal(a);
      el.sig.textContent = sig.text;
      el.sig.setAttribute('class', 'nsig ' + sig.cls);
      el.title.textContent = a.name + ' (' + a.status + ')' + (a.model ? ' · ' + a.model : '') +
        (a.host ? ' · ' + a.host : '');
    }
    for (const [key, el] of G.nodeEls) if (!seenN.has(key)) { el.g.remove(); G.nodeEls.delete(key); }
  }

  // -- conversation

  function openConversation(peer, th) {
    if (S.conv && S.conv.peer === peer && S.conv.th === th) return;
    S.conv = { peer, th, data: null, seqs: new Set(), error: '' };
    clear($('conv-messages'));
    clear($('conv-head'));
    $('conv-empty').hidden = true;
    loadConversation();
  }

  async function loadConversation() {
    const conv = S.conv;
    if (!conv) return;
    if (!S.state) { conv.waiting = true; return; } // names and sides come with the State
    conv.waiting = false;
    let res;
    try {
      res = await fetch('/api/thread?peer=' + enc(conv.peer) + '&th=' + enc(conv.th), { cache: 'no-store' });
    } catch (e) { return; }
    if (S.conv !== conv) return;
    let body = null;
    try { body = await res.json(); } catch (e) { body = null; }
    if (S.conv !== conv) return;
    if (!res.ok) {
      conv.error = (body && body.error) || ('HTTP ' + res.status);
      const empty = $('conv-empty');
      empty.hidden = false;
      empty.textContent = res.status === 404
        ? 'The messages of this thread are private to the two agents: only threads this host is part of, or that are shared with it, can be read here.'
        : 'Cannot load this conversation: ' + conv.error;
      schedule();
      return;
    }
    conv.data = body;
    conv.error = '';
    const list = $('conv-messages');
    clear(list);
    conv.seqs = new Set();
    for (const m of body.messages || []) appendMessage(m, false);
    $('conv-empty').hidden = (body.messages || []).length > 0;
    $('conv-empty').textContent = 'No messages yet.';
    schedule();
    window.scrollTo(0, document.body.scrollHeight);
  }

  function currentThread() {
    const conv = S.conv;
    if (!conv || !S.state) return null;
    return S.state.threads.find((t) => t.th === conv.th &&
      ((t.local && t.peer === conv.peer) || t.shared_by === conv.peer)) || null;
  }

  function renderConversationHead() {
    const conv = S.conv;
    if (!conv) return;
    const head = $('conv-head');
    const t = currentThread();
    const d = conv.data;
    const subject = (t && t.subject) || (d && d.subject) || '';
    let a, b, as, bs, an = '', bn = '';
    if (d) { a = d.a; b = d.b; as = d.a_state; bs = d.b_state; an = d.a_note || ''; bn = d.b_note || ''; }
    if (t) {
      // Fresher states from the State, mapped onto the conversation's sides.
      const tm = {}; tm[t.a] = [t.a_state, t.a_note || '']; tm[t.b] = [t.b_state, t.b_note || ''];
      if (!a) { a = t.a; b = t.b; }
      if (tm[a]) { as = tm[a][0]; an = tm[a][1] || an; }
      if (tm[b]) { bs = tm[b][0]; bn = tm[b][1] || bn; }
    }
    const sig = [subject, a, b, as, bs, an, bn, d && d.shared_by, nameOf(a), nameOf(b)].join('|');
    if (head.dataset.sig === sig) return;
    head.dataset.sig = sig;
    clear(head);
    head.appendChild(h('div', { class: 'toolbar' }, h('a', { class: 'back', href: '#/threads' }, '← threads'),
      h('h1', { text: subject || '(no subject)' }), chip(conv.th, 'copy the thread id')));
    if (a) {
      head.appendChild(h('div', { class: 'sides big' },
        h('span', { class: 'side' }, agentName(a, true), ' ', statePill(as), an ? h('span', { class: 'note', text: an }) : null),
        h('span', { class: 'arrow' }, '⇄'),
        h('span', { class: 'side' }, agentName(b, true), ' ', statePill(bs), bn ? h('span', { class: 'note', text: bn }) : null)));
    }
    if (d && d.shared_by) {
      head.appendChild(h('div', { class: 'shared' }, shareIcon(), ' Shared by ', agentName(d.shared_by, true),
        h('span', { class: 'muted', text: ' · files are not copied to this host' })));
    }
  }

  function isRaster(mime) { return RASTER.includes(String(mime || '').split(';')[0].trim().toLowerCase()); }
  function safeBlobURL(url) { return typeof url === 'string' && url.startsWith('/api/blob?') ? url : ''; }

  function renderPart(p) {
    if (!p || typeof p !== 'object') return null;
    if (p.type === 'text') return h('div', { class: 'text', text: p.text || '' });
    if (p.type === 'code') {
      return h('pre', { class: 'code' }, p.lang ? h('span', { class: 'lang', text: p.lang }) : null,
        h('code', { text: p.text || '' }));
    }
    if (p.type === 'data') {
      let text;
      try { text = JSON.stringify(p.data, null, 2); } catch (e) { text = String(p.data); }
      return h('pre', { class: 'data' }, h('span', { class: 'lang', text: p.mime || 'data' }), h('code', { text: text || '' }));
    }
    if (p.type === 'blob') {
      const url = safeBlobURL(p.url);
      const label = [p.name || 'file', size(p.size), p.mime].filter(Boolean).join(' · ');
      if (url && isRaster(p.mime)) {
        return h('figure', { class: 'image' },
          h('a', { href: url, target: '_blank', rel: 'noopener noreferrer' }, h('img', { src: url, alt: p.name || 'image', loading: 'lazy' })),
          h('figcaption', null, h('a', { href: url, download: p.name || 'image', text: '⤓ ' + label })));
      }
      if (url) return h('a', { class: 'file', href: url, download: p.name || 'file', text: '⤓ ' + label });
      return h('span', { class: 'file missing', text: label + ' · ' + (p.status || 'not on this host') });
    }
    return null;
  }

  function appendMessage(m, live) {
    const conv = S.conv;
    if (!conv || !m || conv.seqs.has(m.seq)) return;
    conv.seqs.add(m.seq);
    const list = $('conv-messages');
    const nearBottom = window.innerHeight + window.scrollY >= document.body.scrollHeight - 80;
    const mine = S.state && m.from === S.state.self;
    let el;
    if (m.kind === 'msg') {
      el = h('div', { class: 'msg' + (mine ? ' mine' : '') },
        avatar(m.from, 30, 'msg-avatar'),
        h('div', { class: 'bubble' },
          h('div', { class: 'meta' }, agentName(m.from, false), h('span', { class: 'when', text: clock(m.at), title: m.at || '' }),
            m.acked === false ? h('span', { class: 'muted', text: ' · not yet delivered' }) : null),
          (m.parts || []).map(renderPart)));
    } else if (m.kind === 'state') {
      el = h('div', { class: 'event' }, agentName(m.from, true), ' is now ', statePill(m.state),
        m.note ? h('span', { class: 'note', text: m.note }) : null, h('span', { class: 'when', text: clock(m.at) }));
    } else {
      el = h('div', { class: 'event k-' + m.kind }, h('span', { class: 'kind', text: KIND_TEXT[m.kind] || m.kind || 'notice' }),
        h('span', { class: 'text', text: m.text || '' }), h('span', { class: 'when', text: clock(m.at) }));
    }
    el.dataset.seq = String(m.seq);
    list.appendChild(el);
    $('conv-empty').hidden = true;
    if (live && nearBottom) window.scrollTo(0, document.body.scrollHeight);
  }

  // -- the board

  // Runs fn one at a time: a call while one runs makes it run once more after.
  function coalesced(fn) {
    let busy = false, again = false;
    const run = async () => {
      if (busy) { again = true; return; }
      busy = true;
      try { await fn(); } catch (e) { /* the next event or reconnect tries again */ }
      busy = false;
      if (again) { again = false; run(); }
    };
    return run;
  }

  async function getJSON(url) {
    const res = await fetch(url, { cache: 'no-store' });
    let body = null;
    try { body = await res.json(); } catch (e) { body = null; }
    return { ok: res.ok, status: res.status, body };
  }

  const loadBoard = coalesced(async () => {
    const r = await getJSON('/api/board');
    S.board.error = r.ok ? '' : ((r.body && r.body.error) || ('HTTP ' + r.status));
    if (r.ok) S.board.topics = (r.body && r.body.topics) || [];
    schedule();
  });

  function badge(text, cls, title) {
    return h('span', { class: 'badge' + (cls ? ' ' + cls : ''), title: title || null, text });
  }

  function topicSig(t) {
    return [t.topic, t.label, t.title, t.mine, t.subscribed, t.known, t.posts, t.unread,
      t.policy_text, ago(t.newest), nameOf(t.owner), (t.warnings || []).join('/')].join('|');
  }

  function topicRow(t) {
    const link = '#/topic/' + enc(t.topic);
    return h('div', { class: 'row topic clickable', title: t.topic,
      onclick: () => { location.hash = link; } },
    h('span', { class: 'label', text: t.label }),
    h('span', { class: 'subject', text: t.title || '' }),
    t.mine ? badge('yours', 'b-mine') : agentName(t.owner, true),
    badge(t.subscribed ? 'subscribed' : 'not subscribed', t.subscribed ? 'b-sub' : ''),
    t.known ? null : badge('policy not known yet', 'b-warn',
      "the owner's topic document has not arrived"),
    (t.warnings || []).map((w) => badge(w.split(':')[0], 'b-warn', w)),
    h('span', { class: 'policy', text: t.policy_text }),
    h('span', { class: 'counts', text: t.posts + (t.posts === 1 ? ' post' : ' posts') }),
    t.unread ? h('span', { class: 'unread', title: 'unread by the agent', text: String(t.unread) }) : null,
    h('span', { class: 'when', text: t.newest ? ago(t.newest) : '', title: t.newest || '' }));
  }

  let topicList = null;
  function renderBoard() {
    if (!topicList) topicList = new Keyed($('topic-list'), topicRow, topicSig);
    const topics = S.board.topics || [];
    topicList.update(topics, (t) => t.topic);
    $('board-count').textContent = S.board.topics ? topics.length + (topics.length === 1 ? ' topic' : ' topics') : '';
    const empty = $('board-empty');
    empty.hidden = topics.length > 0;
    empty.textContent = S.board.error ? 'Cannot load the board: ' + S.board.error
      : S.board.topics ? 'No topics yet: awp topic create NAME makes one, awp subscribe OWNER/NAME follows one.'
        : 'Loading…';
  }

  function openTopic(id) {
    if (S.topic && S.topic.id === id) return;
    S.topic = { id, data: null, error: '', list: null };
    clear($('topic-posts'));
    clear($('topic-head'));
    delete $('topic-head').dataset.sig;
    clear($('topic-queue'));
    delete $('topic-queue').dataset.sig;
    $('topic-queue').hidden = true;
    $('topic-empty').hidden = true;
    loadTopic();
  }

  const loadTopic = coalesced(async () => {
    const tp = S.topic;
    if (!tp) return;
    const r = await getJSON('/api/topic?topic=' + enc(tp.id));
    if (S.topic !== tp) return;
    if (!r.ok) {
      tp.error = r.status === 404 ? 'This host does not know this topic.'
        : 'Cannot load this topic: ' + ((r.body && r.body.error) || ('HTTP ' + r.status));
      tp.data = null;
    } else {
      tp.error = '';
      tp.data = r.body;
    }
    renderTopic();  // the newest posts are at the top: nothing to scroll to
  });

  // Posts in thread order, the newest thread first (where the eye is when the page
  // opens): each post, then its replies (oldest first), depth-first. A reply whose
  // parent is not here (gone, or older than what was read) starts a thread.
  function threadOrder(posts) {
    const byHash = new Map(posts.map((p) => [p.hash, p]));
    const kids = new Map();
    const roots = [];
    for (const p of posts) {
      if (p.parent && p.parent !== p.hash && byHash.has(p.parent)) {
        if (!kids.has(p.parent)) kids.set(p.parent, []);
        kids.get(p.parent).push(p);
      } else {
        roots.push(p);
      }
    }
    const out = [];
    const seen = new Set();
    const stack = roots.map((p) => [p, 0]);  // popped last first: the newest root leads
    while (stack.length) {
      const [p, depth] = stack.pop();
      if (seen.has(p.hash)) continue;
      seen.add(p.hash);
      out.push({ p, depth, orphan: !!p.parent && !byHash.has(p.parent) });
      const replies = kids.get(p.hash) || [];
      for (let i = replies.length - 1; i >= 0; i--) stack.push([replies[i], depth + 1]);
    }
    return out;
  }

  function authorName(p) {
    if (S.agents.has(p.author)) return agentName(p.author, false);
    return h('span', { class: 'who', title: p.author, text: p.author_name || short(p.author) });
  }

  function postSig(x) {
    const p = x.p;
    return [p.hash, x.depth, x.orphan, p.edited, p.replies, nameOf(p.author), p.author_name].join('|');
  }

  function postRow(x) {
    const p = x.p;
    const replies = p.replies ? p.replies + (p.replies === 1 ? ' reply' : ' replies') : '';
    const el = h('div', { class: 'post msg d' + Math.min(x.depth, 6) + (p.mine ? ' mine' : '') },
      avatar(p.author, 28, 'msg-avatar'),
      h('div', { class: 'bubble' },
        h('div', { class: 'meta' }, authorName(p),
          h('span', { class: 'when', text: clock(p.at), title: p.at || '' }),
          p.edited ? h('span', { class: 'edited muted', text: 'edited ' + clock(p.edited), title: p.edited }) : null,
          chip(p.id, 'copy the post id (awp reply ' + p.id + ' "...")'),
          x.orphan ? h('span', { class: 'muted', text: 'reply to ' + p.parent.slice(0, 10) }) : null,
          replies ? h('span', { class: 'muted', text: replies }) : null),
        (p.parts || []).map(renderPart)));
    el.dataset.hash = p.hash;
    return el;
  }

  function renderTopic() {
    const tp = S.topic;
    if (!tp) return;
    const head = $('topic-head');
    const d = tp.data;
    const t = d && d.topic;
    const sig = t ? topicSig(t) : 'none|' + tp.error;
    if (head.dataset.sig !== sig) {
      head.dataset.sig = sig;
      clear(head);
      head.appendChild(h('div', { class: 'toolbar' }, h('a', { class: 'back', href: '#/board' }, '← board'),
        h('h1', { text: (t && (t.title || t.label)) || 'Topic' }),
        t ? chip(t.label, 'copy the topic (awp get ' + t.label + ')') : null));
      if (t) {
        head.appendChild(h('div', { class: 'kv' }, h('span', { class: 'k' }, 'owner'),
          t.mine ? h('span', { text: 'this host' }) : agentName(t.owner, true),
          badge(t.subscribed ? 'subscribed' : 'not subscribed', t.subscribed ? 'b-sub' : '')));
        for (const w of t.warnings || []) {
          head.appendChild(h('div', { class: 'kv' }, h('span', { class: 'k' }, 'warning'),
            badge(w.split(':')[0], 'b-warn', w), h('span', { text: w })));
        }
        head.appendChild(h('div', { class: 'kv' }, h('span', { class: 'k' }, 'policy'),
          h('span', { text: t.policy_text })));
        head.appendChild(h('div', { class: 'kv' }, h('span', { class: 'k' }, 'posts'),
          h('span', { text: t.posts + ' posts, ' + t.records + ' records kept' +
            (t.unread ? ', ' + t.unread + ' unread by the agent' : '') })));
      }
    }
    renderQueue(d && d.queue);
    if (!tp.list) tp.list = new Keyed($('topic-posts'), postRow, postSig);
    const posts = d ? d.posts : [];
    tp.list.update(threadOrder(posts), (x) => x.p.hash);
    const empty = $('topic-empty');
    empty.hidden = posts.length > 0 || (!tp.error && !d);
    empty.textContent = tp.error || 'No posts yet.';
  }

  // A work queue's items: one row each, the columns as the server lists them
  // (awp/web/board.py QUEUE_COLUMNS), each drawn by its kind.
  const QUEUE_CELL = {
    text: (v) => h('span', { text: String(v) }),
    status: (v) => badge(v, 'q-' + v),
    who: (v) => (v ? agentName(v, false) : h('span', { class: 'muted', text: '-' })),
    time: (v) => (v ? h('span', { text: clock(v), title: v }) : h('span', { class: 'muted', text: '-' })),
  };

  function renderQueue(q) {
    const box = $('topic-queue');
    const sig = q ? JSON.stringify(q) : '';
    if (box.dataset.sig === sig) return;
    box.dataset.sig = sig;
    clear(box);
    box.hidden = !q;
    if (!q) return;
    const c = q.counts || {};
    box.appendChild(h('div', { class: 'queue-head' },
      h('h2', { text: 'Queue' }),
      h('span', { class: 'muted', text: ['open', 'claimed', 'done', 'dead']
        .map((k) => (c[k] || 0) + ' ' + k).join(' · ') +
        (q.arbiter ? '' : ' (as the lease records held here say; the owner decides)') })));
    if (!q.rows.length) {
      box.appendChild(h('p', { class: 'empty', text: 'No items yet: awp post TOPIC "..." adds one.' }));
      return;
    }
    const cols = q.columns || [];
    const head = h('tr', {}, cols.map((col) => h('th', { text: col.title })));
    const body = q.rows.map((r) => {
      const tr = h('tr', { class: 'q-row q-' + r.status },
        cols.map((col) => h('td', { class: 'q-' + col.key },
          (QUEUE_CELL[col.kind] || QUEUE_CELL.text)(r[col.key] === undefined ? '' : r[col.key]))));
      tr.dataset.hash = r.hash;
      return tr;
    });
    box.appendChild(h('table', { class: 'queue' }, h('thead', {}, head), h('tbody', {}, body)));
    const workers = q.workers || [];
    if (!workers.length) return;
    const wcols = q.worker_columns || [];
    box.appendChild(h('h2', { text: 'Workers' }));
    box.appendChild(h('table', { class: 'queue workers' },
      h('thead', {}, h('tr', {}, wcols.map((col) => h('th', { text: col.title })))),
      h('tbody', {}, workers.map((w) => h('tr', {}, wcols.map((col) => h('td', { class: 'q-' + col.key },
        (QUEUE_CELL[col.kind] || QUEUE_CELL.text)(w[col.key] === undefined ? '' : w[col.key]))))))));
  }

  function onBoardEvent(d) {
    if (!d || typeof d.topic !== 'string') return;
    if (S.route.view === 'board') loadBoard();
    else if (S.route.view === 'topic' && S.topic && S.topic.id === d.topic) loadTopic();
  }

  function reloadBoardViews() {
    if (S.route.view === 'board') loadBoard();
    if (S.route.view === 'topic' && S.topic) loadTopic();
  }

  // ------------------------------------------------------------------ data

  function setState(st) {
    if (!st || !Array.isArray(st.agents)) return;
    const at = Date.parse(st.at);
    if (!isNaN(at)) S.skew = at - Date.now();
    if (typeof st.activity_seq === 'number' && st.activity_seq < S.maxSeq) {
      resetActivity(); // the web process restarted: its seq started again
    }
    const wasDown = !!S.down;
    S.state = st;
    S.agents = new Map(st.agents.map((a) => [a.key, a]));
    S.down = '';
    if (wasDown) reloadBoardViews();
    if (S.conv && S.conv.waiting) loadConversation();
    schedule();
  }

  function connect() {
    if (S.es) S.es.close();
    const es = new EventSource('/api/events');
    S.es = es;
    es.addEventListener('open', () => {
      $('conn').textContent = 'live';
      $('conn').className = 'conn live';
      if (S.opened && S.conv) { S.conv.seqs = new Set(); S.conv = Object.assign({}, S.conv); loadConversation(); }
      if (S.opened) reloadBoardViews();
      S.opened = true;
    });
    es.addEventListener('state', (ev) => { try { setState(JSON.parse(ev.data)); } catch (e) { /* ignore */ } });
    es.addEventListener('down', (ev) => {
      let d = {};
      try { d = JSON.parse(ev.data); } catch (e) { /* ignore */ }
      S.down = d.error || 'not reachable';
      schedule();
    });
    es.addEventListener('activity', (ev) => {
      try { addActivity(JSON.parse(ev.data)); } catch (e) { return; }
      if (S.route.view === 'activity' || S.route.view === 'overview') schedule();
    });
    es.addEventListener('message', (ev) => {
      let d;
      try { d = JSON.parse(ev.data); } catch (e) { return; }
      if (S.conv && S.conv.data && d.peer === S.conv.peer && d.th === S.conv.th) appendMessage(d.message, true);
    });
    es.addEventListener('board', (ev) => {
      let d;
      try { d = JSON.parse(ev.data); } catch (e) { return; }
      onBoardEvent(d);
    });
    es.addEventListener('error', () => {
      $('conn').textContent = 'reconnecting…';
      $('conn').className = 'conn';
      if (es.readyState === EventSource.CLOSED) setTimeout(() => { if (S.es === es) connect(); }, 2000);
    });
  }

  async function loadActivity() {
    try {
      const res = await fetch('/api/activity?limit=2000', { cache: 'no-store' });
      if (!res.ok) return;
      const body = await res.json();
      for (const item of body.items || []) addActivity(item);
      schedule();
    } catch (e) { /* the stream brings it later */ }
  }

  // ------------------------------------------------------------------ wiring

  function init() {
    $('thread-filter').addEventListener('input', (ev) => setQuery('threads', {
      q: ev.target.value, open: $('thread-open').checked ? '1' : '', scope: $('thread-scope').value }));
    $('thread-open').addEventListener('change', () => setQuery('threads', {
      q: $('thread-filter').value, open: $('thread-open').checked ? '1' : '', scope: $('thread-scope').value }));
    $('thread-scope').addEventListener('change', () => setQuery('threads', {
      q: $('thread-filter').value, open: $('thread-open').checked ? '1' : '', scope: $('thread-scope').value }));
    $('activity-kind').addEventListener('change', (ev) => setQuery('activity', { kind: ev.target.value }));
    window.addEventListener('hashchange', onRoute);
    onRoute();
    connect();
    loadActivity();
    // "2m ago" labels age: redraw the current view now and then.
    setInterval(schedule, 15000);
  }

  // For the browser tests: how many rows each list holds.
  window.awpDebug = { state: () => S.state, activity: () => S.activity.length,
    topics: () => S.board.topics, topic: () => S.topic && S.topic.data };

  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', init);
  else init();
})();
