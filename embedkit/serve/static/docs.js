// The API description (/openapi.json) as a page: each route, its request fields, its answers.
"use strict";

(() => {
  const { api, setup, showError, element } = Embedkit;
  const $ = (id) => document.getElementById(id);

  function refName(schema) {
    return schema && schema.$ref ? schema.$ref.split("/").pop() : null;
  }

  function typeOf(schema) {
    if (schema.oneOf) return schema.oneOf.map(typeOf).join(" | ");
    if (schema.enum) return schema.enum.map((v) => JSON.stringify(v)).join(" | ");
    if (schema.type === "array") return `${typeOf(schema.items || {})}[]`;
    return [].concat(schema.type || "any").join(" | ");
  }

  function limits(schema) {
    const out = [];
    if (schema.minimum !== undefined) out.push(`≥ ${schema.minimum}`);
    if (schema.maximum !== undefined) out.push(`≤ ${schema.maximum}`);
    for (const alt of schema.oneOf || []) if (alt.maxItems !== undefined) out.push(`at most ${alt.maxItems} items`);
    return out.join(", ");
  }

  function fieldTable(schema) {
    const table = element("table", "fields");
    const head = element("tr");
    ["field", "type", "default", "limits", "description"].forEach((h) => head.append(element("th", null, h)));
    table.append(head);
    const required = new Set(schema.required || []);
    for (const [name, field] of Object.entries(schema.properties || {})) {
      const row = element("tr");
      row.append(element("td", null, required.has(name) ? `${name} *` : name));
      row.append(element("td", null, typeOf(field)));
      row.append(element("td", null, field.default === undefined ? "" : JSON.stringify(field.default)));
      row.append(element("td", null, limits(field)));
      row.append(element("td", null, field.description || ""));
      table.append(row);
    }
    return table;
  }

  function operation(path, method, op, schemas) {
    const box = element("section", "operation");
    const title = element("h2");
    title.append(element("span", `method ${method}`, method.toUpperCase()), ` ${path}`);
    box.append(title, element("p", null, op.summary));
    box.append(element("p", "muted", op.security && op.security.length ? "needs the API key" : "no key needed"));
    if (op.requestBody) {
      const name = refName(Object.values(op.requestBody.content)[0].schema);
      box.append(element("h3", null, `request: ${name}`), fieldTable(schemas[name]));
    }
    const answers = element("ul", "responses");
    for (const [status, answer] of Object.entries(op.responses)) {
      const [media, content] = Object.entries(answer.content || {})[0] || [];
      const shape = refName(content && content.schema) || media || "";
      answers.append(element("li", null, `${status} — ${answer.description} (${shape})`));
    }
    box.append(element("h3", null, "answers"), answers);
    return box;
  }

  async function start() {
    let doc;
    try {
      doc = await api("/openapi.json");
    } catch (err) {
      showError(err.message);
      return;
    }
    $("version").textContent = `${doc.info.title} ${doc.info.version} · OpenAPI ${doc.openapi}`;
    const schemas = doc.components.schemas;
    const operations = $("operations");
    operations.replaceChildren();
    for (const [path, methods] of Object.entries(doc.paths)) {
      for (const [method, op] of Object.entries(methods)) operations.append(operation(path, method, op, schemas));
    }
    const list = $("schemas");
    list.replaceChildren();
    for (const [name, schema] of Object.entries(schemas)) {
      const details = element("details");
      details.append(element("summary", null, name), element("pre", null, JSON.stringify(schema, null, 2)));
      list.append(details);
    }
    $("schemas-title").hidden = false;
  }

  document.addEventListener("DOMContentLoaded", () => setup(start));
})();
