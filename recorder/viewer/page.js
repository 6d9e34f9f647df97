// forge-record viewer: draws one session from the JSON in #data (forge_record.viewer.html).
// Every recorded string reaches the page through textContent (or a property such as
// title), never as markup. Content strings are in D.strings and fields hold their index.
"use strict";
(() => {
  const D = JSON.parse(document.getElementById("data").textContent);
  const S = (v) => (typeof v === "number" ? D.strings[v] : v == null ? "" : String(v));
  const $ = (id) => document.getElementById(id);
  const PREVIEW_LINES = 4;

  // What search walks: every drawn content string, and every call.
  const texts = []; // {node, idx, fold, call}
  const calls = []; // {seq, article, details, thread, idx: [string index], names: [str]}
  const threadParts = {}; // thread id -> {section, link}

  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text != null) e.textContent = String(text);
    return e;
  }
  const num = (n) => (n == null ? "–" : Number(n).toLocaleString("en-US"));
  const count = (n, one, many) => `${num(n)} ${n === 1 ? one : many || one + "s"}`;
  const secs = (s) => (s == null ? "–" : s < 1 ? `${Math.round(s * 1000)} ms` : `${s.toFixed(1)} s`);
  const short = (h) => (h || "").replace(/^fr1:/, "").slice(0, 12) || "-";
  const link = (href, text) => Object.assign(el("a", null, text), { href });

  function tokens(u) {
    if (!u) return "";
    // "in" is every prompt token read (forge_record.lineage.usage), its parts beside it
    const input = u.input ?? u.input_tokens;
    const read = u.cache_read ?? u.cache_read_tokens, write = u.cache_write ?? u.cache_write_tokens;
    const parts = [`${num(u.tokens_in ?? input)} in`, `${num(u.output ?? u.output_tokens)} out`];
    if (read || write) parts.push(`${num(input)} uncached`);
    if (read) parts.push(`${num(read)} cache read`);
    if (write) parts.push(`${num(write)} cache write`);
    if (u.reasoning) parts.push(`${num(u.reasoning)} reasoning`);
    return parts.join(" · ");
  }

  // --- header -----------------------------------------------------------------------------

  function drawHead() {
    const s = D.session || {}, u = D.usage || {}, sum = D.summary || {};
    document.title = `forge-record · ${s.id || "session"}`;
    const head = $("head");
    head.append(el("h1", null, `session ${s.id || "?"}`));
    const when = s.started_at ? new Date(s.started_at * 1000).toLocaleString() : "?";
    const took = s.ended_at && s.started_at ? ` · ${secs(s.ended_at - s.started_at)}` : "";
    head.append(el("div", "meta", `${s.harness || "-"} ${s.harness_version || ""} · ${when}${took}`));
    if (s.argv && s.argv.length) head.append(el("div", "meta", `$ ${s.command || s.argv.join(" ")}`));
    head.append(el("div", "meta", `in ${s.cwd || "?"} · exit ${s.exit_code ?? "?"}`));
    head.append(el("div", "meta", `${count(u.calls, "model call")} · ` +
      `${count(u.retries, "retry", "retries")} · ${count(u.side_calls, "side call")} · ` +
      `${count(sum.tool_calls, "tool call")}`));
    head.append(el("div", "meta", `tokens: ${tokens(u)}`));
    const tags = Object.entries(s.tags || {});
    if (tags.length) head.append(el("div", "meta", "tags: " + tags.map(([k, v]) => `${k}=${v}`).join(", ")));
    const e = D.engine;  // the drift alarm (forge_record.exporters.tokens.drift)
    if (e) {
      const flagged = ["tokens_missing", "tokens_mismatch"].filter((f) => e[f]).map((f) => ` · ${e[f]} ${f}`);
      head.append(el("div", "meta", `engine tokens: ${count(e.calls, "call")} · ${e.merged} merged · ` +
        `${count(e.prefix_breaks, "prefix break")}${flagged.join("")}`));
    }
  }

  function drawTree() {
    const nav = $("tree");
    for (const t of D.threads || []) {
      const a = link(`#thread-${t.id}`, t.id);
      a.style.paddingLeft = `${6 + 14 * (t.depth || 0)}px`;
      const from = t.spawned_by ? ` · from #${t.spawned_by[0]}` : "";
      a.append(el("div", "sub", `${t.role} · ${count((t.usage || {}).calls, "call")}${from} · ${tokens(t.usage)}`));
      nav.append(a);
      threadParts[t.id] = { link: a };
    }
  }

  // --- fingerprints ----------------------------------------------------------------------

  function drawFingerprints() {
    const box = $("fingerprints"), fps = D.fingerprints || [];
    box.append(el("h2", null, `Fingerprints (${fps.length}): system prompt and tools`));
    for (const fp of fps) {
      const d = el("details", "fp");
      d.id = `fp-${short(fp.id)}`;
      const betas = (fp.betas || []).length;
      d.append(el("summary", null, `${short(fp.id)} · ${fp.harness || "-"} ${fp.version || ""} · ` +
        `${fp.model || "-"} · ${fp.calls} calls · ${(fp.tools || []).length} tools · ${betas} betas`));
      const body = el("div", "fp-body");
      if (betas) body.append(el("div", "thread-meta", `betas: ${fp.betas.join(", ")}`));
      const system = el("div", "msg role-system");
      system.append(el("div", "who", "system"));
      for (const p of fp.system || []) system.append(drawPart(p, null));
      if (!(fp.system || []).length) system.append(el("div", "thread-meta", "(no system prompt)"));
      body.append(system);
      for (const tool of fp.tools || []) body.append(drawTool(tool));
      d.append(body);
      box.append(d);
    }
  }

  function drawTool(tool) {
    const d = el("details", "tool");
    const kind = tool.kind && tool.kind !== "function" ? ` (${tool.kind})` : "";
    d.append(el("summary", null, `${tool.name}${kind}`));
    if (tool.description != null) d.append(textNode("div", "content", tool.description, d, null));
    d.append(textNode("pre", "schema content", tool.schema, d, null));
    return d;
  }

  // --- threads and calls -----------------------------------------------------------------

  function drawThreads() {
    const box = $("threads");
    for (const t of D.threads || []) {
      const section = el("section", "thread");
      section.id = `thread-${t.id}`;
      const h = el("h2", null, `thread ${t.id}`);
      h.append(el("span", "role", t.role));
      section.append(h);
      section.append(el("div", "thread-meta", threadMeta(t)));
      section.append(...drawTimeline(t));
      const starts = new Map((t.segments || []).map(([first, by]) => [first, by]));
      for (const c of t.calls || []) {
        if (starts.has(c.seq)) {
          const by = starts.get(c.seq);
          section.append(el("div", "segment", `── new segment${by != null ? ` after compaction #${by}` : ""} ──`));
        }
        section.append(drawCall(c, t.id));
      }
      threadParts[t.id].section = section;
      box.append(section);
    }
  }

  function threadMeta(t) {
    const bits = [];
    if (t.spawned_by) bits.push(`spawned by #${t.spawned_by[0]} (${t.spawned_by[1]})`);
    else if (t.parent_thread) bits.push(`from ${t.parent_thread}`);
    const u = t.usage || {};
    bits.push(count(u.calls, "call") + (u.retries ? `, ${count(u.retries, "retry", "retries")}` : ""));
    bits.push(tokens(u));
    const busy = (t.calls || []).reduce((a, c) => a + (c.duration || 0), 0);
    bits.push(`${secs(busy)} in calls`);
    return bits.join(" · ");
  }

  function drawTimeline(t) {
    const bars = t.timeline || [];
    if (!bars.length) return [];
    const t0 = Math.min(...bars.map((b) => b.start || 0));
    const t1 = Math.max(...bars.map((b) => b.end || 0), t0 + 0.001);
    const line = el("div", "timeline");
    line.setAttribute("aria-label", `timeline of thread ${t.id}`);
    for (const b of bars) {
      const bar = el("div", `bar role-${b.role} status-${b.status}`);
      bar.style.left = `${(100 * ((b.start || 0) - t0)) / (t1 - t0)}%`;
      bar.style.width = `${(100 * ((b.end || 0) - (b.start || 0))) / (t1 - t0)}%`;
      bar.title = `#${b.seq} ${b.role} · ${secs((b.end || 0) - (b.start || 0))} · ${b.status}`;
      bar.addEventListener("click", () => reveal(b.seq));
      line.append(bar);
    }
    const axis = el("div", "timeline-axis");
    axis.append(el("span", null, `+${secs(t0)}`), el("span", null, `+${secs(t1)}`));
    return [line, axis];
  }

  function callHead(c) {
    const head = el("span");
    const seq = link(`#call-${c.seq}`, `#${c.seq}`);
    const b = el("b");
    b.append(seq);
    head.append(b, ` ${c.model || "?"}`);
    let what = c.role === "main" ? "" : c.role;
    if (c.retry_of != null) what = `retry of #${c.retry_of}`;
    if (c.side_kind) what += ` (${c.side_kind})`;
    if (what) head.append(el("span", "badge", what.trim()));
    const status = `${c.status} ${c.http_status ?? ""}`.trim();
    const ttfb = c.ttfb != null ? ` (first byte ${secs(c.ttfb)})` : "";
    head.append(` · ${status} · ${secs(c.duration)}${ttfb} · ${tokens(c.usage)}`);
    if (c.stop_reason) head.append(` · ${c.stop_reason}`);
    if ((c.flags || []).length) head.append(el("span", "badge", c.flags.join(", ")));
    const fp = short(S(c.fingerprint));
    head.append(" · fp ", link(`#fp-${fp}`, fp));
    return head;
  }

  function drawCall(c, threadId) {
    const article = el("article", `call role-${c.role}${c.folded ? " folded" : ""}`);
    article.id = `call-${c.seq}`;
    const entry = { seq: c.seq, article, thread: threadId, idx: [], names: [], details: null };
    calls.push(entry);
    const body = el("div", "call-body");
    if (c.folded) {
      const d = el("details");
      const summary = el("summary");
      summary.append(callHead(c));
      if (c.said != null) summary.append(" · ", textNode("span", null, c.said, null, entry));
      d.append(summary, body);
      article.append(d);
      entry.details = d;
    } else {
      const head = el("div", "call-head");
      head.append(callHead(c));
      article.append(head, body);
    }
    for (const m of c.messages || []) body.append(drawMessage(m.role, m.parts, entry));
    if ((c.reply || []).length) body.append(drawMessage("assistant", c.reply, entry, "reply"));
    if (c.error != null) body.append(textNode("div", "error-line", c.error, null, entry));
    if ((c.spawns || []).length) {
      const s = el("div", "spawns", "spawned: ");
      for (const id of c.spawns) s.append(link(`#thread-${id}`, id), " ");
      body.append(s);
    }
    return article;
  }

  function drawMessage(role, parts, entry, label) {
    const box = el("div", `msg role-${role}`);
    box.append(el("div", "who", label ? `${role} (${label})` : role));
    for (const p of parts || []) box.append(drawPart(p, entry));
    return box;
  }

  function drawPart(p, entry) {
    const box = el("div", `part ${p.kind}${p.error ? " error" : ""}`);
    const label = partLabel(p);
    if (label) box.append(el("div", "label", label));
    if (entry && p.name) entry.names.push(p.name);
    const tag = p.kind === "text" || p.kind === "thinking" ? "div" : "pre";
    if (p.folded) {
      const d = el("details", "fold");
      const full = S(p.text), lines = full.split("\n");
      const summary = el("summary", null, `${num(lines.length)} lines, ${num(full.length)} chars`);
      summary.append(el("span", "preview", lines.slice(0, PREVIEW_LINES).join("\n") + "\n…"));
      d.append(summary, textNode(tag, "content", p.text, d, entry));
      box.append(d);
    } else {
      box.append(textNode(tag, "content", p.text, null, entry));
    }
    return box;
  }

  function partLabel(p) {
    const name = p.name || "?";
    switch (p.kind) {
      case "thinking": return "thinking";
      case "tool_call": return `→ ${name}${p.ref ? `  ${p.ref}` : ""}${p.error ? " (arguments did not parse)" : ""}`;
      case "tool_result": return `← result of ${name}${p.ref ? `  ${p.ref}` : ""}${p.error ? " (error)" : ""}`;
      case "media": return "media";
      case "other": return "other block";
      default: return "";
    }
  }

  // A content string drawn as text and registered for search.
  function textNode(tag, cls, idx, fold, entry) {
    const node = el(tag, cls, S(idx));
    texts.push({ node, idx, fold, call: entry });
    if (entry && typeof idx === "number") entry.idx.push(idx);
    return node;
  }

  // --- search ----------------------------------------------------------------------------

  let lower = null, marks = [], current = -1;

  function search(raw) {
    const q = raw.trim().toLowerCase();
    for (const t of texts) if (t.marked) { t.node.textContent = S(t.idx); t.marked = false; }
    marks = []; current = -1;
    if (!q) {
      for (const c of calls) c.article.hidden = false;
      for (const id in threadParts) show(id, true);
      $("hits").textContent = "";
      return;
    }
    lower = lower || D.strings.map((s) => s.toLowerCase());
    const hit = D.strings.map((_, i) => lower[i].includes(q));
    const isHit = (idx) => (typeof idx === "number" ? hit[idx] : S(idx).toLowerCase().includes(q));
    const found = new Set();
    for (const c of calls) {
      const match = c.idx.some((i) => hit[i]) || c.names.some((n) => n.toLowerCase().includes(q));
      c.article.hidden = !match;
      if (match) found.add(c.thread);
      if (match && c.details) c.details.open = true;
    }
    for (const id in threadParts) show(id, found.has(id));
    for (const t of texts) {
      if (!isHit(t.idx)) continue;
      mark(t, q);
      if (t.fold) t.fold.open = true;
    }
    const n = calls.filter((c) => !c.article.hidden).length;
    $("hits").textContent = `${n} of ${calls.length} calls match · ${marks.length} hits` +
      (marks.length ? " · Enter for next" : "");
  }

  function show(threadId, visible) {
    const p = threadParts[threadId];
    if (p.section) p.section.hidden = !visible;
    p.link.classList.toggle("hidden-thread", !visible);
  }

  function mark(t, q) {
    const text = S(t.idx), low = text.toLowerCase();
    if (low.length !== text.length) { // lower-casing changed lengths: mark the whole text
      const m = el("mark", null, text);
      t.node.replaceChildren(m);
      marks.push(m); t.marked = true;
      return;
    }
    const frag = document.createDocumentFragment();
    let at = 0, next = low.indexOf(q);
    while (next !== -1 && marks.length < 5000) {
      frag.append(text.slice(at, next));
      const m = el("mark", null, text.slice(next, next + q.length));
      frag.append(m); marks.push(m);
      at = next + q.length;
      next = low.indexOf(q, at);
    }
    frag.append(text.slice(at));
    t.node.replaceChildren(frag);
    t.marked = true;
  }

  function nextHit() {
    if (!marks.length) return;
    if (current >= 0) marks[current].classList.remove("current");
    current = (current + 1) % marks.length;
    const m = marks[current];
    m.classList.add("current");
    for (let p = m.parentElement; p; p = p.parentElement) if (p.tagName === "DETAILS") p.open = true;
    m.scrollIntoView({ block: "center" });
  }

  function reveal(seq) {
    const c = calls.find((x) => x.seq === seq);
    if (!c) return;
    if (c.details) c.details.open = true;
    c.article.scrollIntoView({ block: "start" });
  }

  function wireSearch() {
    const box = $("search");
    let timer = 0;
    box.addEventListener("input", () => { clearTimeout(timer); timer = setTimeout(() => search(box.value), 120); });
    box.addEventListener("keydown", (e) => {
      if (e.key !== "Enter") return;
      clearTimeout(timer);
      if (box.dataset.done !== box.value) { search(box.value); box.dataset.done = box.value; }
      nextHit();
    });
  }

  function followHash() {
    const hash = decodeURIComponent(location.hash.slice(1));
    if (hash.startsWith("q=")) {
      $("search").value = hash.slice(2);
      search(hash.slice(2));
    } else if (hash.startsWith("call-")) {
      reveal(Number(hash.slice(5)));
    } else if (hash) {
      const target = document.getElementById(hash);
      if (target) target.scrollIntoView();
    }
  }

  if (D.format !== 1) {
    $("threads").append(el("p", "error-line", `This page holds data format ${D.format}; this viewer reads format 1.`));
    return;
  }
  drawHead();
  drawTree();
  drawFingerprints();
  drawThreads();
  wireSearch();
  followHash();
  window.addEventListener("hashchange", followHash);
  performance.mark("forge-record-rendered");
  document.documentElement.dataset.rendered = String(calls.length);
})();
