// The search page: dense, lexical and hybrid rankings of one query side by side (or one mode), or,
// on a server without an index, the cosine of two texts' vectors.
"use strict";

(() => {
  const { api, setup, showError, element } = Embedkit;
  const MODES = ["dense", "lexical", "hybrid"];
  const $ = (id) => document.getElementById(id);

  async function start() {
    let card;
    try {
      card = (await api("/v1/models")).data[0];
    } catch (err) {
      showError(err.message);
      return;
    }
    $("model").textContent = `${card.id} · ${card.dim}-d · ${card.backend} ${card.device} ${card.precision}`;
    $("search").hidden = !card.index;
    $("similarity").hidden = card.index;
    (card.index ? $("query") : $("text-a")).focus();
    if (card.index) searchFromAddress();
  }

  // The address holds the search (`/?q=...&mode=...&k=...`), so a result can be linked: the page
  // reads it on load and on back/forward, and writes it when the user searches.
  const LINKED = { q: "query", mode: "mode", k: "k", fusion: "fusion", alpha: "alpha" };

  function searchFromAddress() {
    const params = new URLSearchParams(window.location.search);
    if (!params.get("q")) return;
    for (const [name, id] of Object.entries(LINKED)) {
      if (params.has(name)) $(id).value = params.get(name);
    }
    if (!$("mode").value) $("mode").value = "all";  // a mode the page does not offer
    runSearch();
  }

  function addressOfSearch() {
    const params = new URLSearchParams();
    for (const [name, id] of Object.entries(LINKED)) {
      const value = $(id).value;
      const usual = { mode: "all", k: "10" }[name] ?? "";
      if (name === "q" || value !== usual) params.set(name, value);
    }
    return `${window.location.pathname}?${params}`;
  }

  // A snippet is HTML with the query's terms in <b>: rebuilt as text nodes and <mark>s, so
  // that nothing else in it can become markup.
  function snippetNode(html) {
    const out = element("p", "snippet");
    const parsed = new DOMParser().parseFromString(`<div>${html}</div>`, "text/html").body.firstChild;
    for (const node of parsed.childNodes) {
      if (node.nodeType === Node.ELEMENT_NODE && node.tagName === "B") {
        out.append(element("mark", null, node.textContent));
      } else {
        out.append(document.createTextNode(node.textContent));
      }
    }
    return out;
  }

  function score(value) {
    return value === null || value === undefined ? "–" : Number(value).toFixed(4);
  }

  function hitItem(hit) {
    const item = element("li", "hit");
    item.dataset.id = hit.id;
    const head = element("div", "hit-head");
    head.append(element("code", "hit-id", hit.id));
    if (hit.title) head.append(element("strong", "hit-title", hit.title));
    item.append(head);
    if (hit.snippet) item.append(snippetNode(hit.snippet));
    else if (hit.text) item.append(element("p", "text", hit.text));
    const scores = [`score ${score(hit.score)}`];
    if ("dense_score" in hit) scores.push(`dense ${score(hit.dense_score)}`);
    if ("lexical_score" in hit) scores.push(`lexical ${score(hit.lexical_score)}`);
    item.append(element("p", "scores muted", scores.join(" · ")));
    const metadata = Object.entries(hit.metadata || {});
    if (metadata.length) {
      const list = element("dl", "metadata");
      for (const [key, value] of metadata) {
        list.append(element("dt", null, key), element("dd", null, typeof value === "object" ? JSON.stringify(value) : value));
      }
      item.append(list);
    }
    return item;
  }

  // The request of one column. Fusion and dense weight are sent only where chosen: otherwise the
  // server uses the index's own (calibrated) fusion, as `embedkit search` does.
  function searchBody(mode, request) {
    const body = { query: request.query, k: request.k, mode, snippets: true };
    if (mode === "hybrid" && request.fusion) body.fusion = request.fusion;
    if (mode === "hybrid" && request.alpha !== null) body.alpha = request.alpha;
    return body;
  }

  async function searchColumn(mode, request, column) {
    const body = searchBody(mode, request);
    const began = performance.now();
    try {
      const data = await api("/search", body);
      const ms = performance.now() - began;
      const hits = data.results[0].hits;
      const facts = [`${hits.length} hits`, `${ms.toFixed(1)} ms`];
      if (mode === "hybrid") facts.push(`fusion ${data.fusion}`, `dense weight ${data.alpha}`);
      column.querySelector(".facts").textContent = facts.join(" · ");
      const list = element("ol", "hits");
      hits.forEach((hit) => list.append(hitItem(hit)));
      column.append(list);
    } catch (err) {
      column.querySelector(".facts").textContent = "";
      column.append(element("p", "column-error", err.message));
      if (err.status === 401) showError(err.message);
    }
  }

  function search(event) {
    event.preventDefault();
    const address = addressOfSearch();
    if (address !== `${window.location.pathname}${window.location.search}`) {
      window.history.pushState(null, "", address);
    }
    runSearch();
  }

  async function runSearch() {
    showError("");
    const request = {
      query: $("query").value,
      k: Number($("k").value) || 10,
      fusion: $("fusion").value,  // "": the index's
      alpha: $("alpha").value === "" ? null : Number($("alpha").value),
    };
    const chosen = $("mode").value;
    const modes = chosen === "all" ? MODES : [chosen];
    const results = $("results");
    results.replaceChildren();
    results.dataset.columns = modes.length;
    const columns = modes.map((mode) => {
      const column = element("section", "column");
      column.dataset.mode = mode;
      column.append(element("h2", null, mode), element("p", "facts muted", "searching…"));
      results.append(column);
      return column;
    });
    await Promise.all(modes.map((mode, i) => searchColumn(mode, request, columns[i])));
    results.dataset.done = "1";
  }

  function cosine(a, b) {
    let dot = 0, na = 0, nb = 0;
    for (let i = 0; i < a.length; i++) {
      dot += a[i] * b[i];
      na += a[i] * a[i];
      nb += b[i] * b[i];
    }
    return dot / Math.sqrt(na * nb);
  }

  async function compare(event) {
    event.preventDefault();
    showError("");
    const began = performance.now();
    try {
      const data = await api("/v1/embeddings", { input: [$("text-a").value, $("text-b").value] });
      const ms = performance.now() - began;
      const [a, b] = data.data.map((d) => d.embedding);
      $("cosine").textContent = `cosine ${cosine(a, b).toFixed(4)} · ${ms.toFixed(1)} ms`;
    } catch (err) {
      $("cosine").textContent = "";
      showError(err.message);
    }
  }

  document.addEventListener("DOMContentLoaded", () => {
    $("search-form").addEventListener("submit", search);
    window.addEventListener("popstate", () => {
      if (!$("search").hidden) searchFromAddress();
    });
    $("similarity-form").addEventListener("submit", compare);
    setup(start);
  });
})();
