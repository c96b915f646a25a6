"""The search page in a real browser (Chromium driven by Playwright) against `embedkit serve`.

The page's columns are compared with /search's own answers for the same query, and the cosine
page with the encoder's vectors. A screenshot of each page is left in the test's tmp_path.
Chromium is the system's (Debian's `chromium` package; `.ci/run` installs it); Playwright never
downloads a browser here. Without it the tests skip, naming the browser they need.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")
playwright = pytest.importorskip("playwright.sync_api")

from serve_helpers import serving  # noqa: E402

CHROMIUM = os.environ.get("EMBEDKIT_CHROMIUM", "/usr/bin/chromium")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
KEY = "page-key-5"
QUERY = "shock wave over a wing"
MODES = ("dense", "lexical", "hybrid")


@pytest.fixture(scope="module")
def browser():
    if not Path(CHROMIUM).exists() and shutil.which(CHROMIUM) is None:
        pytest.skip(f"the browser tests need Chromium at {CHROMIUM} (Debian: apt-get install chromium)")
    with playwright.sync_playwright() as driver:
        chromium = driver.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture(scope="module")
def server(tiny_onnx: Path, tiny_index: Path):
    args = [str(tiny_onnx), "--index", str(tiny_index), "--api-key", KEY, "--max-wait-ms", "1"]
    with serving(args) as process:
        yield process


def search_ids(url: str, mode: str, k: int = 10) -> list[str]:
    """The ids /search answers for `QUERY`, asked as the page asks."""
    body = {"query": QUERY, "k": k, "mode": mode, "snippets": True}
    if mode == "hybrid":
        body.update(fusion="prf", alpha=0.7)
    response = httpx.post(f"{url}/search", json=body, headers={"Authorization": f"Bearer {KEY}"}, timeout=30)
    assert response.status_code == 200, response.text
    return [hit["id"] for hit in response.json()["results"][0]["hits"]]


def column_ids(page, mode: str) -> list[str]:
    return page.eval_on_selector_all(
        f'.column[data-mode="{mode}"] li.hit', "items => items.map(item => item.dataset.id)"
    )


def enter_key(page, key: str) -> None:
    page.wait_for_selector("#key-form:not([hidden])")
    page.fill("#api-key", key)
    page.click("#key-form button")


def run_search(page) -> None:
    page.evaluate("delete document.getElementById('results').dataset.done")
    page.click("#search-form button")
    page.wait_for_selector("#results[data-done]")


def test_three_rankings_side_by_side_match_search(browser, server, tmp_path: Path):
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(server.url)
    enter_key(page, KEY)
    page.wait_for_selector("#search:not([hidden])")
    page.fill("#query", QUERY)
    run_search(page)

    modes = page.eval_on_selector_all(".column", "columns => columns.map(c => c.dataset.mode)")
    assert modes == list(MODES)
    for mode in MODES:
        assert column_ids(page, mode) == search_ids(server.url, mode), mode
    assert page.locator(".column-error").count() == 0
    facts = page.inner_text('.column[data-mode="hybrid"] .facts')
    assert "ms" in facts and "fusion prf" in facts and "dense weight 0.7" in facts
    # every hit shows its id, scores and, for w1 and h1, the corpus's metadata
    first = page.locator('.column[data-mode="dense"] li.hit').first
    assert "score" in first.inner_text()
    metadata = page.inner_text("#results")
    assert "year" in metadata or "lab" in metadata
    page.screenshot(path=str(tmp_path / "search-three-columns.png"), full_page=True)

    page.select_option("#mode", "lexical")
    run_search(page)
    assert page.eval_on_selector_all(".column", "cs => cs.map(c => c.dataset.mode)") == ["lexical"]
    assert column_ids(page, "lexical") == search_ids(server.url, "lexical")
    assert errors == []
    context.close()


def test_a_wrong_key_shows_the_servers_error(browser, server, tmp_path: Path):
    context = browser.new_context()
    page = context.new_page()
    page.goto(server.url)
    assert page.locator("#results .hit").count() == 0  # the page itself holds no data
    enter_key(page, "not-the-key")
    page.wait_for_selector("#error:not([hidden])")
    assert "API key" in page.inner_text("#error")
    assert page.is_visible("#key-form") and page.is_hidden("#search")
    page.screenshot(path=str(tmp_path / "wrong-key.png"))
    context.close()


def test_without_an_index_the_page_compares_two_texts(browser, tiny_onnx: Path, tiny_onnx_encoder, tmp_path):
    texts = ["the cat eats food", "a man is playing guitar on the beach"]
    a, b = np.asarray(tiny_onnx_encoder.encode(texts), np.float64)
    expected = float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))
    with serving([str(tiny_onnx), "--max-wait-ms", "1"]) as server:
        context = browser.new_context()
        page = context.new_page()
        page.goto(server.url)
        page.wait_for_selector("#similarity:not([hidden])")
        assert page.is_hidden("#search")
        page.fill("#text-a", texts[0])
        page.fill("#text-b", texts[1])
        page.click("#similarity-form button")
        page.wait_for_selector("#cosine:text-matches('^cosine ')")
        shown = float(page.inner_text("#cosine").split()[1])
        assert shown == pytest.approx(expected, abs=6e-5)  # shown to 4 decimals
        page.screenshot(path=str(tmp_path / "cosine.png"))
        context.close()


def test_the_docs_page_lists_every_route(browser, server, tmp_path: Path):
    context = browser.new_context()
    page = context.new_page()
    page.goto(f"{server.url}/docs")
    enter_key(page, KEY)
    page.wait_for_selector(".operation")
    document = httpx.get(f"{server.url}/openapi.json", headers={"Authorization": f"Bearer {KEY}"}).json()
    titles = page.eval_on_selector_all(".operation h2", "hs => hs.map(h => h.textContent)")
    expected = [f"{method.upper()} {path}" for path, ops in document["paths"].items() for method in ops]
    assert titles == expected
    assert "inputs *" in page.inner_text("#operations")
    page.screenshot(path=str(tmp_path / "docs.png"))
    context.close()


def test_a_snippet_shows_its_matched_terms_and_nothing_else_as_markup(browser, server):
    """A snippet is HTML with the query's terms in <b>; the page keeps only those as <mark>s."""
    hostile = "the <b>shock</b> wave &lt;i&gt;x&lt;/i&gt; "
    hostile += '<img src=x onerror="window.hit=1"><script>window.hit=2</script>'
    answer = {
        "object": "list",
        "model": "m",
        "mode": "lexical",
        "results": [{"query": "q", "hits": [{"rank": 1, "id": "s1", "score": 1.0, "snippet": hostile}]}],
    }
    context = browser.new_context()
    page = context.new_page()
    page.route(
        "**/search",
        lambda route: route.fulfill(status=200, content_type="application/json", body=json.dumps(answer)),
    )
    page.goto(server.url)
    enter_key(page, KEY)
    page.wait_for_selector("#search:not([hidden])")
    page.fill("#query", "shock")
    page.select_option("#mode", "lexical")
    run_search(page)
    snippet = page.locator(".snippet")
    assert snippet.inner_text() == "the shock wave <i>x</i> window.hit=2"
    assert page.eval_on_selector_all(".snippet mark", "ms => ms.map(m => m.textContent)") == ["shock"]
    assert page.locator(".snippet img, .snippet script, .snippet i").count() == 0
    assert page.evaluate("window.hit") is None
    context.close()


def test_at_1280_px_every_hit_shows_a_snippet_inside_its_column(browser, server, tmp_path: Path):
    """Every column's hits read as snippets (the whole document never comes), and a long
    unbroken line (a reStructuredText ===== rule) wraps inside its column."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.goto(server.url)
    enter_key(page, KEY)
    page.wait_for_selector("#search:not([hidden])")
    page.fill("#query", QUERY)
    run_search(page)
    for mode in MODES:
        hits = page.locator(f'.column[data-mode="{mode}"] li.hit')
        assert hits.count() == len(search_ids(server.url, mode)) > 0, mode
        assert page.locator(f'.column[data-mode="{mode}"] li.hit .snippet').count() == hits.count(), mode
        assert page.locator(f'.column[data-mode="{mode}"] li.hit p.text').count() == 0, mode

    rule = "=" * 400
    answer = {
        "object": "list",
        "model": "m",
        "mode": "dense",
        "results": [{"query": "q", "hits": [{"rank": 1, "id": "r1", "score": 1.0, "snippet": rule}]}],
    }
    page.route(
        "**/search",
        lambda route: route.fulfill(status=200, content_type="application/json", body=json.dumps(answer)),
    )
    page.select_option("#mode", "dense")
    run_search(page)
    widths = page.evaluate(
        "() => { const c = document.querySelector('.column'); const p = c.querySelector('.snippet');"
        " return [c.getBoundingClientRect().right, p.getBoundingClientRect().right,"
        " p.scrollWidth, p.clientWidth]; }"
    )
    column_right, snippet_right, scroll_width, client_width = widths
    assert snippet_right <= column_right + 0.5 and scroll_width <= client_width, widths
    page.screenshot(path=str(tmp_path / "search-1280.png"), full_page=True)
    context.close()


def test_the_address_holds_the_search_so_a_result_can_be_linked(browser, server, tmp_path: Path):
    """`/?q=...&mode=...` searches on load; a search writes its query into the address, and back
    brings the earlier search again. The reference is /search's own answer for each query."""
    from urllib.parse import parse_qs, urlsplit

    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    page.goto(f"{server.url}/?q={QUERY.replace(' ', '+')}&mode=lexical")
    enter_key(page, KEY)  # a new tab holds no key: the search runs once it is given
    page.wait_for_selector("#results[data-done]")
    assert page.input_value("#query") == QUERY and page.input_value("#mode") == "lexical"
    assert page.eval_on_selector_all(".column", "cs => cs.map(c => c.dataset.mode)") == ["lexical"]
    assert column_ids(page, "lexical") == search_ids(server.url, "lexical")

    page.fill("#query", "heat transfer")
    page.select_option("#mode", "dense")
    run_search(page)
    assert parse_qs(urlsplit(page.url).query) == {"q": ["heat transfer"], "mode": ["dense"]}
    dense = httpx.post(
        f"{server.url}/search",
        json={"query": "heat transfer", "k": 10, "mode": "dense", "snippets": True},
        headers={"Authorization": f"Bearer {KEY}"},
        timeout=30,
    ).json()["results"][0]["hits"]
    assert column_ids(page, "dense") == [hit["id"] for hit in dense]

    page.evaluate("delete document.getElementById('results').dataset.done")
    page.go_back()
    page.wait_for_selector("#results[data-done]")
    assert page.input_value("#query") == QUERY
    assert column_ids(page, "lexical") == search_ids(server.url, "lexical")
    page.screenshot(path=str(tmp_path / "linked-search.png"), full_page=True)
    context.close()
