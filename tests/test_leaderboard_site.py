"""``icir leaderboard build``: a static site from two real submissions, checked as bytes and in headless Chromium.

The two submissions are full ``icir_mcq_n5`` runs of tiny random Qwen3-VL models; the first also
runs ``vhs_single_n5`` (VHs columns and vote curves) and carries a submitter and link full of
markup, the second is a model whose name is markup: ``<img src=x onerror=alert(1)>``. It has
its own weights (seed 1), so the two rows differ and a numeric sort is observable.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from filelock import FileLock
from lm_eval_helpers import build_shared, full_run, shared_root

from harness.cli import main as icir_main
from harness.leaderboard.entries import entry_key
from harness.leaderboard.schema import MANIFEST
from harness.leaderboard.site import BUILD_MARKER, build_site
from icir_common import UserInputError

XSS_NAME = "<img src=x onerror=alert(1)>"
SUBMITTER = 'tester <script>alert("s")</script> & co'
LINK = 'https://example.org/?a=1&b="><img src=y onerror=alert(2)>'
CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")


def _submit(run: Path, scratch: Path, board: Path, *extra: str) -> str:
    assert icir_main(["submit", str(run), "--out", str(scratch), *extra]) == 0
    key = entry_key(json.loads((scratch / MANIFEST).read_text()))
    target = board / "results" / key
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(scratch, target)
    return key


@pytest.fixture(scope="module")
def board(tmp_path_factory) -> Path:
    """A leaderboard folder with the two submissions, built once per session (xdist workers share it)."""
    from harness.tiny_models import save_tiny

    shared = build_shared(shared_root(tmp_path_factory))
    root = shared_root(tmp_path_factory).parent / "leaderboard_site"
    with FileLock(str(root) + ".lock"):
        if not (root / "done").exists():
            shutil.rmtree(root, ignore_errors=True)
            xss_model = save_tiny("qwen3_vl", root / "models" / XSS_NAME, seed=1)
            first = full_run(shared, root / "runs" / "first", "icir_mcq_n5,vhs_single_n5", "--gen_kwargs",
                             "max_gen_toks=4")
            second = full_run(shared, root / "runs" / "second", "icir_mcq_n5", model=xss_model)
            _submit(first, root / "scratch" / "first", root / "board", "--submitter", SUBMITTER, "--link", LINK)
            _submit(second, root / "scratch" / "second", root / "board")
            (root / "done").touch()
    return root / "board"


@pytest.fixture(scope="module")
def site(board, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site") / "site"
    assert icir_main(["leaderboard", "build", str(board), "--out", str(out)]) == 0
    return out


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_layout_and_rows(site, board, capsys):
    rows = json.loads((site / "leaderboard.json").read_text())
    keys = sorted(p.relative_to(board / "results").as_posix() for p in (board / "results").glob("*/*"))
    assert sorted(row["key"] for row in rows) == keys
    r1 = [row["pointer_r1"] for row in rows]
    assert r1 == sorted(r1, reverse=True)
    by_model = {row["model"]: row for row in rows}
    assert by_model[XSS_NAME]["submitter"] is None and by_model["model"]["submitter"] == SUBMITTER
    assert by_model["model"]["vhs_sizes"] == [5] and by_model[XSS_NAME]["vhs_sizes"] == []
    for row in rows:
        page = site / row["page"]
        assert page.is_file() and page.parent == site / "models"
        pngs = sorted(p.name for p in page.with_suffix("").glob("*.png"))
        assert {"pointer_exact.png", "pointer_eq3.png", "writer.png", "pointer_vs_writer.png"} <= set(pngs)
    vhs_pngs = list((site / by_model["model"]["page"]).with_suffix("").glob("vote_*.png"))
    assert [p.name for p in vhs_pngs] == ["vote_vhs_single_n5.png"]
    assert "No VHs task submitted" in (site / by_model[XSS_NAME]["page"]).read_text()
    assert "No ablation submitted" in (site / by_model[XSS_NAME]["page"]).read_text()
    import pyarrow.parquet as pq

    table = pq.read_table(site / "leaderboard.parquet")
    assert table.column("key").to_pylist() == [row["key"] for row in rows]
    assert table.column("pointer_r1").to_pylist() == r1
    assert "vhs_n5_vote_r1" in table.column_names and "deviations" not in table.column_names
    for page in [site / "index.html", *(site / "models").glob("*.html")]:
        text = page.read_text()  # nothing fetched: no external script, style, font or image
        assert 'src="http' not in text and "<link" not in text and "@import" not in text and "url(" not in text


def test_build_twice_is_byte_identical(site, board, tmp_path):
    again = tmp_path / "again"
    assert build_site(board, again) == again / "index.html"
    first, second = _files(site), _files(again)
    assert sorted(first) == sorted(second) and first == second
    assert all(b"Software" not in data and b"tIME" not in data for name, data in first.items() if name.endswith(".png"))
    build_site(board, again)  # an earlier build is replaced whole, to the same bytes
    assert _files(again) == first
    assert json.loads((again / BUILD_MARKER).read_text()) == {"kind": "leaderboard-site"}


def test_strings_are_escaped(site):
    pages = [site / "index.html", *sorted((site / "models").glob("*.html"))]
    for page in pages:
        text = page.read_text()
        for raw in (XSS_NAME, "<script>alert", "<img src=y", '"><img'):
            assert raw not in text, (page.name, raw)
        assert text.count("<script>") == (1 if page.name == "index.html" else 0)
    index = (site / "index.html").read_text()
    assert "&lt;img src=x onerror=alert(1)&gt;" in index
    assert "tester &lt;script&gt;alert(&quot;s&quot;)&lt;/script&gt; &amp; co" in index
    assert 'href="https://example.org/?a=1&amp;b=&quot;&gt;&lt;img src=y onerror=alert(2)&gt;"' in index
    names = [p.name for p in (site / "models").iterdir()]
    assert all(set(n) <= set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") for n in names)


def test_invalid_submission_refused(board, tmp_path, capsys):
    copy = tmp_path / "board"
    shutil.copytree(board, copy)
    (bad,) = [p for p in (copy / "results").glob("*/*") if p.parent.name == XSS_NAME]
    (bad / "notes.json").write_text("{}")
    out = tmp_path / "site"
    with pytest.raises(UserInputError) as raised:
        build_site(copy, out)
    message = str(raised.value)
    assert str(bad) in message and "notes.json: not listed in the manifest" in message
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["board"]
    assert icir_main(["leaderboard", "build", str(copy), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "does not validate" in err
    assert not out.exists()


def test_misplaced_submission_refused(board, tmp_path):
    copy = tmp_path / "board"
    shutil.copytree(board, copy)
    (folder,) = [p for p in (copy / "results").glob("*/*") if p.parent.name == "model"]
    folder.rename(folder.with_name("elsewhere"))
    with pytest.raises(UserInputError, match="move it to results/model/"):
        build_site(copy, tmp_path / "site")
    assert not (tmp_path / "site").exists()


def test_out_that_is_not_a_site_refused(board, tmp_path):
    out = tmp_path / "site"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(UserInputError, match="not an earlier leaderboard site"):
        build_site(board, out)
    assert [p.name for p in out.iterdir()] == ["keep.txt"]
    empty = tmp_path / "empty"
    empty.mkdir()
    assert build_site(board, empty).is_file()
    with pytest.raises(UserInputError, match="SUBMISSIONS_DIR"):
        build_site(board, board / "site")


# ---------------------------------------------------------------------------- headless Chromium


@pytest.fixture(scope="module")
def browser():
    """Headless Debian Chromium through Selenium; skipped where it is missing, a failure under CI."""
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.is_file()]
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        missing.append("the selenium package (pip install -e '.[dev]')")
    if missing:
        reason = f"no headless browser: {', '.join(missing)} missing (apt-get install chromium chromium-driver)"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--window-size=1920,900", "--allow-file-access-from-files"):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


def _open(driver, page: Path) -> None:
    driver.get(page.resolve().as_uri())
    _no_dialog(driver)
    severe = [entry for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]
    assert severe == [], severe


def _no_dialog(driver) -> None:
    from selenium.common.exceptions import NoAlertPresentException

    with pytest.raises(NoAlertPresentException):
        driver.switch_to.alert  # noqa: B018 (the property raises when no dialog is open)
    assert driver.execute_script('return document.querySelectorAll(\'img[src="x"], img[src="y"]\').length') == 0


def _column(driver, index: int) -> list[str | None]:
    return driver.execute_script(
        "var column = arguments[0]; return Array.from(document.querySelectorAll('#board tbody tr'))"
        ".map(function (row) { return row.cells[column].getAttribute('data-sort'); });", index)


def _keys(driver) -> list[str]:
    return driver.execute_script(
        "return Array.from(document.querySelectorAll('#board tbody tr')).map(r => r.getAttribute('data-key'));")


def test_site_in_browser(browser, site, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    rows = json.loads((site / "leaderboard.json").read_text())
    _open(browser, site / "index.html")
    screenshot = Path(os.environ.get("ICIR_SCREENSHOT", str(tmp_path / "leaderboard.png")))
    screenshot.parent.mkdir(parents=True, exist_ok=True)
    assert browser.save_screenshot(str(screenshot)) and screenshot.stat().st_size > 0
    assert _keys(browser) == [row["key"] for row in rows]
    headers = browser.find_elements(By.CSS_SELECTOR, "#board thead th")
    columns = [h.get_attribute("data-column") for h in headers]
    numeric = [i for i, h in enumerate(headers) if h.get_attribute("data-type") == "number"]
    # a numeric column whose two values differ: the random models' accuracies and R@1 do
    (index,) = [i for i in numeric if len({v for v in _column(browser, i) if v is not None}) == 2][:1]
    headers[index].click()
    descending = [float(v) for v in _column(browser, index)]
    assert descending == sorted(descending, reverse=True) and headers[index].get_attribute("aria-sort") == "descending"
    first_order = _keys(browser)
    headers[index].click()
    assert [float(v) for v in _column(browser, index)] == descending[::-1]
    assert _keys(browser) == first_order[::-1] and headers[index].get_attribute("aria-sort") == "ascending"
    vhs = columns.index("vhs_n5_acc")  # the second model ran no VHs: missing, so last either way
    for _ in range(2):
        headers[vhs].click()
        assert _column(browser, vhs)[-1] is None and _column(browser, vhs)[0] is not None
    headers[columns.index("model")].click()
    assert _keys(browser) == sorted(row["key"] for row in rows)

    family = Select(browser.find_element(By.ID, "family"))
    assert [o.get_attribute("value") for o in family.options] == ["", "qwen3_vl"]
    family.select_by_value("qwen3_vl")
    assert len([r for r in browser.find_elements(By.CSS_SELECTOR, "#board tbody tr") if r.is_displayed()]) == 2
    assert browser.find_element(By.ID, "shown").text == "2 of 2 submissions shown"

    (xss_row,) = [r for r in rows if r["model"] == XSS_NAME]
    cell = browser.find_element(By.CSS_SELECTOR, f'#board tbody tr[data-key="{xss_row["key"]}"] td.model')
    assert cell.text == XSS_NAME
    assert browser.find_elements(By.CSS_SELECTOR, "#board img") == []
    badges = browser.find_elements(By.CSS_SELECTOR, "#board .badge")
    assert [b.text for b in badges] == ["self-reported"] * 2
    assert badges[0].value_of_css_property("background-color") != "rgba(0, 0, 0, 0)"  # styled, not bare text
    for row in rows:
        _open(browser, site / row["page"])
        images = browser.find_elements(By.TAG_NAME, "img")
        assert len(images) >= 4
        for image in images:
            assert browser.execute_script("return arguments[0].complete && arguments[0].naturalWidth", image) > 0, \
                image.get_attribute("src")
        assert browser.find_element(By.TAG_NAME, "h1").text == row["model"]
