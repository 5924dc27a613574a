"""The playground page at ``GET /`` in a real headless browser against real ``bertkit serve`` processes:
type, click, read what the page rendered. Skips (with the reason) when no browser or driver is installed
(Debian: ``apt-get install -y chromium chromium-driver``; Python: ``pip install selenium``)."""

from __future__ import annotations

import shutil
import time

import pytest

pytest.importorskip("fastapi", reason="serve extra not installed: pip install 'bertkit[serve]'")
pytest.importorskip("prometheus_client", reason="serve extra not installed: pip install 'bertkit[serve]'")
webdriver = pytest.importorskip("selenium.webdriver", reason="selenium not installed: pip install selenium")

from serving_utils import Server, tiny_dir  # noqa: E402

from bertkit.heads.finetune import BertForQuestionAnswering, BertForTokenClassification  # noqa: E402
from bertkit.heads.pretraining import BertForMaskedLM  # noqa: E402

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")
if not (CHROMIUM and DRIVER):
    pytest.skip("no headless browser: apt-get install -y chromium chromium-driver", allow_module_level=True)

FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
]  # fmt: skip


@pytest.fixture(scope="module")
def browser():
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = CHROMIUM
    for f in FLAGS:
        options.add_argument(f)
    try:
        driver = webdriver.Chrome(service=Service(DRIVER), options=options)
    except Exception as e:  # a browser that cannot start here is an environment problem, not a failure
        pytest.skip(f"chromium did not start: {str(e).splitlines()[0]}")
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    root = tmp_path_factory.mktemp("playground")
    dirs = {
        "mlm": tiny_dir(BertForMaskedLM, root / "mlm"),
        "qa": tiny_dir(BertForQuestionAnswering, root / "qa"),
        "ner": tiny_dir(
            BertForTokenClassification, root / "ner", num_labels=3, id2label={0: "O", 1: "B-PER", 2: "I-PER"}
        ),
    }
    started = {}
    try:
        for name, d in dirs.items():
            started[name] = Server(d, root)
        yield started
    finally:
        for s in started.values():
            s.stop()


def _open(browser, server):
    from selenium.webdriver.common.by import By

    browser.get(f"http://127.0.0.1:{server.port}/")
    _wait(lambda: browser.find_element(By.TAG_NAME, "body").get_attribute("data-ready") == "1")
    return By


def _wait(cond, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if cond():
                return
        except Exception:  # the element may not exist yet
            pass
        time.sleep(0.1)
    raise AssertionError("timed out waiting for the page")


def _type(el, text):
    el.clear()
    el.send_keys(text)


def test_fill_mask_and_similarity(browser, servers):
    By = _open(browser, servers["mlm"])
    assert browser.find_element(By.ID, "fill-mask").is_displayed()
    assert not browser.find_element(By.ID, "qa").is_displayed()  # the MLM dir has no QA head
    want = servers["mlm"].request("POST", "/fill-mask", {"text": "the cat sat on the [MASK]", "top_k": 3})[1]
    _type(browser.find_element(By.ID, "fm-text"), "the cat sat on the [MASK]")
    _type(browser.find_element(By.ID, "fm-k"), "3")
    browser.find_element(By.ID, "fm-run").click()
    _wait(lambda: len(browser.find_elements(By.CSS_SELECTOR, "#fm-result .result-row")) == 3)
    labels = [e.text for e in browser.find_elements(By.CSS_SELECTOR, "#fm-result .label")]
    assert labels == [m["token"] for m in want["masks"][0]]
    widths = [e.size["width"] for e in browser.find_elements(By.CSS_SELECTOR, "#fm-result .bar")]
    assert widths == sorted(widths, reverse=True) and widths[0] > 0
    # an error is shown on the page, not thrown away
    _type(browser.find_element(By.ID, "fm-text"), "no mask here")
    browser.find_element(By.ID, "fm-run").click()
    _wait(lambda: "[MASK]" in browser.find_element(By.ID, "fm-error").text)

    _type(browser.find_element(By.ID, "rr-query"), "the cat sat")
    _type(browser.find_element(By.ID, "rr-texts"), "a dog\nthe cat sat on the mat\nbad movie")
    browser.find_element(By.ID, "rr-run").click()
    _wait(lambda: len(browser.find_elements(By.CSS_SELECTOR, "#rr-result li")) == 3)
    want = servers["mlm"].request(
        "POST",
        "/rerank",
        {
            "query": "the cat sat",
            "texts": ["a dog", "the cat sat on the mat", "bad movie"],
            "return_text": True,
        },
    )[1]
    shown = [e.text for e in browser.find_elements(By.CSS_SELECTOR, "#rr-result .ranked-text")]
    assert shown == [r["text"] for r in want]


def test_qa_answer_highlighted(browser, servers):
    By = _open(browser, servers["qa"])
    context = "the cat sat on the mat . the dog was very bad"
    want = servers["qa"].request("POST", "/qa", {"question": "who sat", "context": context})[1]
    _type(browser.find_element(By.ID, "qa-question"), "who sat")
    _type(browser.find_element(By.ID, "qa-context"), context)
    browser.find_element(By.ID, "qa-run").click()
    _wait(lambda: browser.find_element(By.ID, "qa-answer").text != "")
    marks = browser.find_elements(By.CSS_SELECTOR, "#qa-result mark")
    assert [m.text for m in marks] == [want["answer"]]
    assert browser.find_element(By.ID, "qa-result").text == context  # the whole context, answer marked


def test_ner_entities_highlighted(browser, servers):
    By = _open(browser, servers["ner"])
    text = "the cat sat on the mat with a dog"
    want = servers["ner"].request("POST", "/ner", {"text": text})[1]["entities"]
    _type(browser.find_element(By.ID, "ner-text"), text)
    browser.find_element(By.ID, "ner-run").click()
    _wait(lambda: browser.find_element(By.ID, "ner-result").text != "")
    marks = browser.find_elements(By.CSS_SELECTOR, "#ner-result mark")
    assert [m.get_attribute("data-type") for m in marks] == [e["entity_group"] for e in want]
    assert [m.text.replace("PER", "").strip() for m in marks] == [e["word"] for e in want]
