"""The HTML report (`--html`): the Markdown's sections, figures inline, no network at view time,
checked in headless Chromium.

How the browser check works, and why this way: Chromium is driven over the DevTools protocol on
a pipe (`--remote-debugging-pipe`, no port). The test enables the page's Network domain,
navigates to the `file://` report, waits for its load event, then asks the page (Runtime) for
its headings, text and every `<img>` after `img.decode()`. Every request the *page* makes is a
`Network.requestWillBeSent` event of the page's own session, so the "no request" check counts
exactly the page's requests: a proxy or a resolver log would also see the browser's own
background traffic (account and time queries that Chromium sends whatever the page). As a
second fence the browser gets a proxy that refuses (127.0.0.1:9) and a resolver that finds no
host, so nothing could leave the machine even if a request were made. A control page with a
remote image, a remote stylesheet and a relative file shows that the check sees all three.

Chromium is Debian's `chromium` package; `.ci/run` installs it and sets MLB_REQUIRE_CHROMIUM=1,
so there the browser tests fail rather than skip.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import io
import json
import os
import re
import selectors
import shutil
import subprocess
import time
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from PIL import Image
from test_report import _pair
from test_run import SET_ARGS
from typer.testing import CliRunner

from mlbaseline.cli import app
from mlbaseline.errors import OutputExistsError
from mlbaseline.report.html import data_url, markdown_to_html, trend_svg
from mlbaseline.report.inputs import collect
from mlbaseline.report.render import REPORT_NAME, render_report
from mlbaseline.report.sections_history import HistoryView, Mark, TrendLine

REPO = Path(__file__).resolve().parent.parent
GOLDEN = REPO / "tests/golden/report"
HTML_NAME = "baseline_report.html"
BROWSER_WAIT_S = 90  # a guard against a hung browser, never a measured time


def _png(width: int = 3, height: int = 2) -> str:
    """A small PNG, base64."""
    buf = io.BytesIO()
    Image.new("RGB", (width, height), "#4c72b0").save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode("ascii")


PNG_SMALL = _png()
# elements whose src/href the browser loads by itself when the page is viewed
LOADING = {"img", "script", "link", "iframe", "source", "video", "audio", "embed", "object"}


# ---------------------------------------------------------------- static checks


class _Refs(HTMLParser):
    """Every (tag, attribute, value) of a src/href/data attribute, and the headings' text."""

    def __init__(self) -> None:
        super().__init__()
        self.refs: list[tuple[str, str, str]] = []
        self.headings: list[str] = []
        self._in: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.refs += [(tag, k, v or "") for k, v in attrs if k in ("src", "href", "data")]
        if tag in ("h1", "h2"):
            self._in, self.headings = tag, [*self.headings, ""]

    def handle_endtag(self, tag: str) -> None:
        if tag == self._in:
            self._in = None

    def handle_data(self, data: str) -> None:
        if self._in:
            self.headings[-1] += data


def refs_of(page: str) -> _Refs:
    parser = _Refs()
    parser.feed(page)
    return parser


def md_headings(md: str) -> list[str]:
    """The h1/h2 headings of the Markdown, as the page shows them (code marks taken off)."""
    lines = [ln for ln in md.splitlines() if re.match(r"^##? ", ln)]
    return [ln.lstrip("#").replace("`", "").strip() for ln in lines]


def headline(md: str) -> tuple[str, list[str]]:
    """The section the report leads with (its heading, its lines of prose as plain text):
    Markdown emphasis, code marks, link targets and list bullets taken off, tables left out."""
    body = md.split("\n## ", 2)[1]
    heading, *rest = body.split("\n")
    prose = [ln for ln in rest if ln.strip() and not ln.startswith(("|", "<"))]
    plain = [re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", ln) for ln in prose]
    plain = [re.sub(r"(?<!\w)_(.+?)_(?!\w)", r"\1", ln) for ln in plain]  # _emphasis_
    plain = [re.sub(r"^\s*[-*] ", "", re.sub(r"\*\*|`", "", ln)).strip() for ln in plain]
    return heading.strip(), plain


@pytest.fixture(scope="module")
def golden_html(tmp_path_factory):
    out = tmp_path_factory.mktemp("golden-html")
    found = collect([GOLDEN])
    rendered = render_report(found.items, out, manifest=found.manifest, html=True)
    return rendered, rendered.markdown_path.read_text(encoding="utf-8")


def test_html_is_written_beside_the_markdown_only_when_asked(golden_html, tmp_path):
    rendered, _ = golden_html
    assert rendered.html_path == rendered.markdown_path.with_name(HTML_NAME)
    assert rendered.html_path.is_file()
    found = collect([GOLDEN / "throughput.json"])
    plain = render_report(found.items, tmp_path)
    assert plain.html_path is None and not (tmp_path / HTML_NAME).exists()


def test_an_existing_html_page_needs_force_and_nothing_is_written_without_it(tmp_path):
    found = collect([GOLDEN / "throughput.json"])
    (tmp_path / HTML_NAME).write_text("old page")
    with pytest.raises(OutputExistsError):
        render_report(found.items, tmp_path, html=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == [HTML_NAME]  # nothing drawn
    rendered = render_report(found.items, tmp_path, html=True, force=True)
    assert rendered.html_path is not None
    assert rendered.html_path.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")


def test_html_has_the_markdown_sections_in_order(golden_html):
    rendered, md = golden_html
    page = rendered.html_path.read_text(encoding="utf-8")
    assert refs_of(page).headings == md_headings(md)
    assert len(md_headings(md)) > 5


def test_every_figure_is_inline_and_nothing_loads_from_elsewhere(golden_html):
    rendered, md = golden_html
    page = rendered.html_path.read_text(encoding="utf-8")
    imgs = [v for tag, k, v in refs_of(page).refs if tag == "img" and k == "src"]
    figures_in_md = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", md)
    assert len(figures_in_md) == len(rendered.figures) > 3
    assert len(imgs) == len(figures_in_md)
    assert all(v.startswith("data:image/png;base64,") for v in imgs)
    for tag, attr, v in refs_of(page).refs:
        if tag in LOADING:
            assert v.startswith("data:"), (tag, attr, v[:80])
    assert "figures/" not in page  # no figure path left: the file views on its own
    assert not re.search(r"url\(|@import|https?://", page.split("<body>")[0])  # stylesheet


def test_raw_html_blocks_pass_through_and_markdown_inside_them_is_converted(tmp_path):
    (tmp_path / "figures").mkdir()
    png = tmp_path / "figures/a.png"
    png.write_bytes(base64.b64decode(PNG_SMALL))
    md = (
        "# T\n\nThe headline.\n\n<details><summary>Appendix</summary>\n\n## Quiet signals\n\n"
        "| a | b |\n|---|---:|\n| 1 | 2 |\n\n![alt a](figures/a.png)\n\n</details>\n\n"
        '<p><img src="figures/a.png" alt="raw"> <img src="https://example.test/x.png"></p>\n'
    )
    page = markdown_to_html(md, tmp_path)
    assert "<details><summary>Appendix</summary>" in page and "</details>" in page
    assert '<h2 id="quiet-signals">Quiet signals</h2>' in page and "<table>" in page
    srcs = [v for tag, k, v in refs_of(page).refs if tag == "img"]
    assert srcs[:2] == [f"data:image/png;base64,{PNG_SMALL}"] * 2
    assert srcs[2] == "data:,"  # the remote one: emptied, never fetched
    assert "<title>T</title>" in page


@pytest.mark.parametrize(
    "rel",
    [
        "https://example.test/a.png",
        "//example.test/a.png",
        "../a.png",
        "/etc/hostname",
        "figures/missing.png",
        "x.json",
    ],
)
def test_a_figure_that_is_not_a_local_image_is_never_inlined_or_linked(tmp_path, rel):
    (tmp_path / "x.json").write_text("{}")
    assert data_url(rel, tmp_path) is None
    page = markdown_to_html(f"# T\n\n![the alt]({rel})\n", tmp_path)
    assert "<img" not in page and "[figure not available: the alt]" in page


def test_data_url_refuses_other_schemes(tmp_path):
    (tmp_path / "a.png").write_bytes(base64.b64decode(PNG_SMALL))
    assert data_url("a.png", tmp_path) == f"data:image/png;base64,{PNG_SMALL}"
    for rel in (f"file://{tmp_path}/a.png", "javascript:alert(1)", "data:image/png;base64,AA"):
        assert data_url(rel, tmp_path) is None


def _view() -> HistoryView:
    lines = [
        TrendLine("train.bs16.step", [0, 1, 2, 3], [0.10, 0.11, 0.10, 0.15], [0.09] * 4, [0.2] * 4),
        TrendLine("train.bs16.forward", [1, 2, 3], [0.04, 0.05, 0.04], [None] * 3, [None] * 3),
    ]
    return HistoryView("train step (s)", "s", ["#1", "#2", "#3", "#4"], lines, [Mark(3, "#4")])


def test_trend_svg_has_a_point_per_run_with_its_value_and_a_legend_per_line():
    svg = trend_svg(_view())
    assert svg.count("<circle") == 7 and svg.count('class="key"') == 2
    assert "train.bs16.step, run #4: 150 ms [90 ms, 200 ms]" in svg
    assert "train.bs16.forward, run #2: 40 ms</title>" in svg  # no CI: none shown
    assert "median (ms)" in svg
    assert svg.count('stroke-opacity=".4"') == 4  # a CI whisker where the run has a CI
    assert svg.count("stroke-dasharray") == 1 and "change point: #4</title>" in svg
    assert [f">#{n}</text>" in svg for n in range(1, 5)] == [True] * 4  # every run labelled
    assert trend_svg(HistoryView("t", "s", [], [])) == ""


def test_trend_svg_never_puts_two_units_on_one_axis():
    view = _view()
    view.lines.append(
        TrendLine("train.bs16.rate", [0, 1], [800.0, 810.0], [790.0, 800.0], [810.0, 820.0],
                  unit="items/s")
    )  # fmt: skip
    svgs = trend_svg(view).split("<figure>")[1:]
    assert len(svgs) == 2
    assert "median (ms)" in svgs[0] and svgs[0].count("<circle") == 7
    assert "median (items/s)" in svgs[1] and "run #2: 810/s [800/s, 820/s]" in svgs[1]


def test_trend_svg_draws_one_kind_per_chart_with_its_own_change_points():
    runs = ["#1", "#2", "#3"]
    lines = [
        TrendLine("train.bs16.step", [0, 1, 2], [0.1, 0.1, 0.2], [None] * 3, [None] * 3,
                  kind="run"),
        TrendLine("train.bs16.step", [1, 2], [0.1, 0.1], [None] * 2, [None] * 2,
                  kind="throughput"),
    ]  # fmt: skip
    marks = [Mark(2, "#3", kind="run")]
    svgs = trend_svg(HistoryView("step", "s", runs, lines, marks)).split("<figure>")[1:]
    assert len(svgs) == 2
    assert "step (run)" in svgs[0] and svgs[0].count("<circle") == 3
    assert "step (throughput)" in svgs[1] and svgs[1].count("<circle") == 2
    assert "change point: #3" in svgs[0] and "change point" not in svgs[1]


def test_report_with_history_places_the_interactive_trend_after_its_figure(tmp_path):
    found = collect([GOLDEN / "throughput.json"])
    rendered = render_report(found.items, tmp_path, history=_view(), html=True)
    assert rendered.html_path is not None
    page = rendered.html_path.read_text(encoding="utf-8")
    history = page.split('<h2 id="history">')[1]
    assert history.index("data:image/png") < history.index('<svg class="trend"')
    assert "<script>" in page and "addEventListener" in page


def test_cli_html_option(tmp_path):
    out = tmp_path / "r"
    res = CliRunner().invoke(
        app, ["report", str(GOLDEN / "throughput.json"), "-o", str(out), "--html", "-q", "--json"]
    )
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout)
    assert summary["html"] == str(out / HTML_NAME) and Path(summary["html"]).is_file()
    assert (out / REPORT_NAME).is_file()
    again = CliRunner().invoke(app, ["report", str(GOLDEN), "-o", str(out), "--html"])
    assert again.exit_code == 2  # a non-empty folder needs --force, HTML or not


def test_compare_report_html_has_the_forest_inline(tmp_path):
    old, new = _pair(tmp_path, slow_forward=0.2)
    out = tmp_path / "cmp"
    res = CliRunner().invoke(
        app, ["report", "--compare", str(old), str(new), "-o", str(out), "--html", "-q"]
    )
    assert res.exit_code == 0, res.output
    page = (out / "compare_report.html").read_text(encoding="utf-8")
    md = (out / "compare_report.md").read_text(encoding="utf-8")
    assert refs_of(page).headings == md_headings(md)
    imgs = [v for tag, k, v in refs_of(page).refs if tag == "img"]
    assert len(imgs) == 1 and imgs[0].startswith("data:image/png;base64,")


def test_run_html_writes_the_page_beside_its_report(tmp_path):
    out = tmp_path / "run"
    skip = "env-check,dataloader,latency"  # throughput and its report: the least that has figures
    res = CliRunner().invoke(app, ["run", "-o", str(out), "--html", "--skip", skip, *SET_ARGS])
    assert res.exit_code == 0, res.output
    page = (out / HTML_NAME).read_text(encoding="utf-8")
    md = (out / REPORT_NAME).read_text(encoding="utf-8")
    assert refs_of(page).headings == md_headings(md)
    assert page.count("data:image/png;base64,") == md.count("](figures/") > 0
    said = "".join(res.stderr.split())  # rich wraps a long path at the terminal's width
    assert f"HTMLreport:{out / HTML_NAME}" in said


# ---------------------------------------------------------------- headless Chromium


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        if os.environ.get("MLB_REQUIRE_CHROMIUM") == "1":
            pytest.fail("MLB_REQUIRE_CHROMIUM=1 but no chromium on PATH (apt-get install chromium)")
        pytest.skip("chromium is not installed (Debian: apt-get install chromium; CI installs it)")
    return found


class DevTools:
    """A minimal DevTools-protocol client on Chromium's pipe (fd 3 in, fd 4 out; JSON + NUL)."""

    def __init__(self, binary: str, profile: Path) -> None:
        to_browser, self._w = os.pipe()
        self._r, from_browser = os.pipe()
        args = [
            binary, "--headless", "--disable-gpu", "--no-sandbox", "--remote-debugging-pipe",
            f"--user-data-dir={profile}", "--no-first-run", "--disable-background-networking",
            "--disable-dev-shm-usage",  # containers often have a small /dev/shm
            "--proxy-server=127.0.0.1:9", "--proxy-bypass-list=<-loopback>",
            "--host-resolver-rules=MAP * ~NOTFOUND",
        ]  # fmt: skip

        def fds() -> None:  # in the child: the pipe ends where Chromium expects them
            high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (to_browser, from_browser)]
            os.dup2(high[0], 3)
            os.dup2(high[1], 4)

        self.proc = subprocess.Popen(
            args,
            preexec_fn=fds,
            pass_fds=(3, 4),  # kept open after fds() (the rest are closed)
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(to_browser)
        os.close(from_browser)
        self._buf = b""
        self._id = 0
        self.events: list[dict[str, Any]] = []
        self._deadline = time.monotonic() + BROWSER_WAIT_S

    def _read(self) -> dict[str, Any]:
        sel = selectors.DefaultSelector()
        sel.register(self._r, selectors.EVENT_READ)
        while b"\0" not in self._buf:
            if not sel.select(max(0.0, self._deadline - time.monotonic())):
                raise TimeoutError("chromium did not answer")
            chunk = os.read(self._r, 1 << 16)
            if not chunk:
                raise EOFError("chromium closed its pipe")
            self._buf += chunk
        msg, self._buf = self._buf.split(b"\0", 1)
        return json.loads(msg)

    def call(self, method: str, session: str | None = None, **params: Any) -> dict[str, Any]:
        self._id += 1
        msg: dict[str, Any] = {"id": self._id, "method": method, "params": params}
        if session:
            msg["sessionId"] = session
        os.write(self._w, json.dumps(msg).encode() + b"\0")
        while True:
            got = self._read()
            if got.get("id") == self._id:
                if "error" in got:
                    raise RuntimeError(f"{method}: {got['error']}")
                return got.get("result", {})
            self.events.append(got)

    def wait_for(self, method: str, session: str) -> None:
        if any(e.get("method") == method and e.get("sessionId") == session for e in self.events):
            return
        while True:
            got = self._read()
            self.events.append(got)
            if got.get("method") == method and got.get("sessionId") == session:
                return

    def close(self) -> None:
        with contextlib.suppress(OSError, EOFError, TimeoutError, RuntimeError):
            self.call("Browser.close")
        try:
            self.proc.wait(timeout=BROWSER_WAIT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()  # the browser this test started, by its own handle
            self.proc.wait()
        os.close(self._r)
        os.close(self._w)


# what the page says about itself once loaded: headings, text, and every image decoded
PAGE_FACTS = """(async () => {
  const imgs = [...document.images];
  const decoded = await Promise.all(imgs.map(i => i.decode().then(() => true, () => false)));
  return JSON.stringify({
    headings: [...document.querySelectorAll('h1,h2')].map(e => e.textContent.trim()),
    text: document.body.innerText,
    images: imgs.map((i, n) => ({w: i.naturalWidth, h: i.naturalHeight, ok: decoded[n],
                                 scheme: i.src.split(':')[0]})),
    details: document.querySelectorAll('details').length,
    trend_points: document.querySelectorAll('svg.trend circle').length,
  });
})()"""


def open_in_chromium(page: Path, tmp_path: Path) -> tuple[dict[str, Any], list[str]]:
    """(the page's facts, the URL of every request the page made other than itself)."""
    browser = DevTools(chromium(), tmp_path / "profile")
    try:
        target = browser.call("Target.createTarget", url="about:blank")["targetId"]
        session = browser.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        browser.call("Network.enable", session)
        browser.call("Page.enable", session)
        url = page.resolve().as_uri()
        browser.call("Page.navigate", session, url=url)
        browser.wait_for("Page.loadEventFired", session)
        got = browser.call(
            "Runtime.evaluate", session, expression=PAGE_FACTS, awaitPromise=True,
            returnByValue=True,
        )  # fmt: skip
        facts = json.loads(got["result"]["value"])
        requests = [
            e["params"]["request"]["url"]
            for e in browser.events
            if e.get("method") == "Network.requestWillBeSent" and e.get("sessionId") == session
        ]
    finally:
        browser.close()
    return facts, [r for r in requests if r != url and not r.startswith(("data:", "about:"))]


def test_chromium_sees_the_control_page_requests(tmp_path):
    """The check can fail: a remote image, a remote stylesheet and a relative file are seen."""
    page = tmp_path / "control.html"
    page.write_text(
        '<html><head><link rel="stylesheet" href="https://example.test/a.css"></head><body>'
        f'<h1>control</h1><img src="http://example.test/b.png"><img src="figures/c.png">'
        f'<img src="data:image/png;base64,{PNG_SMALL}"></body></html>'
    )
    facts, requests = open_in_chromium(page, tmp_path)
    assert facts["headings"] == ["control"]
    assert [i["ok"] for i in facts["images"]] == [False, False, True]
    assert "https://example.test/a.css" in requests and "http://example.test/b.png" in requests
    assert any(r.endswith("/figures/c.png") for r in requests)


def test_chromium_opens_the_report_finds_headline_and_every_figure_and_no_request(
    golden_html, tmp_path
):
    rendered, md = golden_html
    alone = tmp_path / "alone" / HTML_NAME  # no figures/ folder beside it: it must not need one
    alone.parent.mkdir()
    shutil.copy(rendered.html_path, alone)
    facts, requests = open_in_chromium(alone, tmp_path)
    assert requests == []
    assert facts["headings"] == md_headings(md)
    first, lines = headline(md)  # what the report leads with: it comes first, every line shown
    assert facts["headings"][1] == first and lines
    text = " ".join(facts["text"].split())
    for line in lines:
        assert " ".join(line.split()) in text, line
    assert text.index(" ".join(lines[-1].split())) < text.index(facts["headings"][2])
    figures = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", md)
    assert len(facts["images"]) == len(figures) == len(rendered.figures)
    for img in facts["images"]:
        assert img["ok"] and img["scheme"] == "data" and img["w"] > 100 and img["h"] > 100
    assert facts["details"] == md.count("<details")


def test_chromium_shows_the_interactive_trend(tmp_path):
    found = collect([GOLDEN / "throughput.json"])
    rendered = render_report(found.items, tmp_path / "r", history=_view(), html=True)
    assert rendered.html_path is not None
    facts, requests = open_in_chromium(rendered.html_path, tmp_path)
    assert requests == [] and facts["trend_points"] == 7
