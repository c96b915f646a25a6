// Shared by the search and docs pages: the API key (asked once, kept in this tab's sessionStorage)
// and calls to the API with it. The pages hold no data; everything comes through these calls.
"use strict";

const Embedkit = (() => {
  const KEY = "embedkit-api-key";
  let onKey = null;

  class ApiFailure extends Error {
    constructor(status, message) {
      super(message);
      this.status = status;
    }
  }

  function headers() {
    const key = sessionStorage.getItem(KEY);
    const out = { "Content-Type": "application/json" };
    if (key) out.Authorization = `Bearer ${key}`;
    return out;
  }

  // GET without a body, POST with one; the parsed JSON, or an ApiFailure with the server's message.
  async function api(path, body) {
    const init = body === undefined ? { headers: headers() } : { method: "POST", headers: headers(), body: JSON.stringify(body) };
    let response;
    try {
      response = await fetch(path, init);
    } catch (err) {
      throw new ApiFailure(0, `the server cannot be reached: ${err.message}`);
    }
    let data = null;
    try {
      data = await response.json();
    } catch (err) {
      data = null;
    }
    if (!response.ok) {
      const error = data && data.error;
      const message = typeof error === "string" ? error : (error && error.message) || `HTTP ${response.status}`;
      if (response.status === 401) askForKey();
      throw new ApiFailure(response.status, message);
    }
    return data;
  }

  function askForKey() {
    const form = document.getElementById("key-form");
    form.hidden = false;
    document.getElementById("api-key").focus();
  }

  function showError(message) {
    const box = document.getElementById("error");
    box.textContent = message;
    box.hidden = !message;
  }

  // `start` runs once the page loads and again after a key is entered.
  function setup(start) {
    onKey = start;
    document.getElementById("key-form").addEventListener("submit", (event) => {
      event.preventDefault();
      const input = document.getElementById("api-key");
      sessionStorage.setItem(KEY, input.value.trim());
      input.value = "";
      document.getElementById("key-form").hidden = true;
      showError("");
      onKey();
    });
    start();
  }

  function element(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  return { api, ApiFailure, setup, showError, element };
})();
