"""The console in a real headless browser (Debian's chromium and chromedriver, driven by
selenium): the pages load, the message browser finds a produced record, a group's lag is
what was produced minus what was committed, and a topic is created and deleted through
the confirmation flow. A screenshot of each page goes to the test's tmp_path, or to
docs/console/ (linked from the README) when ODRADEK_SCREENSHOTS=1."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.console.conftest import COMMITTED, PRODUCED, ConsoleProcess, Seeded, running_console

CHROMEDRIVER = Path("/usr/bin/chromedriver")
CHROMIUM = Path("/usr/bin/chromium")
REPO = Path(__file__).resolve().parents[2]
WAIT_S = 30.0

if not (CHROMEDRIVER.exists() and CHROMIUM.exists()):
    pytest.skip(
        "browser tests need Debian's chromium and chromium-driver (make browser installs them)",
        allow_module_level=True,
    )
webdriver = pytest.importorskip("selenium.webdriver")
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.remote.webdriver import WebDriver  # noqa: E402
from selenium.webdriver.support import expected_conditions  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402

confluent_kafka = pytest.importorskip("confluent_kafka")


@pytest.fixture
def console(seeded: Seeded, tmp_path: Path) -> Iterator[ConsoleProcess]:
    with running_console(
        seeded.bootstrap, tmp_path / "console.log", "--sample-interval", "0.5"
    ) as process:
        yield process


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[WebDriver]:
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",  # else chromium calls home on a closed network
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        "--window-size=1280,900",
        f"--user-data-dir={tmp_path / 'chromium-profile'}",
    ):
        options.add_argument(flag)
    service = webdriver.ChromeService(executable_path=str(CHROMEDRIVER))
    driver = webdriver.Chrome(options=options, service=service)
    try:
        yield driver
    finally:
        driver.quit()  # ends chromedriver and the browser it started


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    if os.environ.get("ODRADEK_SCREENSHOTS") == "1":
        return REPO / "docs" / "console"
    return tmp_path / "screenshots"


def screenshot(driver: WebDriver, where: Path, name: str) -> None:
    """The whole page: the window grows to the document's height (plus the window's
    own chrome) first."""
    where.mkdir(parents=True, exist_ok=True)
    height, chrome = driver.execute_script(
        "return [document.documentElement.scrollHeight, window.outerHeight - window.innerHeight]"
    )
    driver.set_window_size(1280, min(max(int(height) + int(chrome), 500), 3000))
    assert driver.save_screenshot(str(where / f"{name}.png"))
    driver.set_window_size(1280, 900)


def visit(driver: WebDriver, url: str) -> None:
    driver.get(url)
    WebDriverWait(driver, WAIT_S).until(
        expected_conditions.presence_of_element_located((By.TAG_NAME, "footer"))
    )


def cells(driver: WebDriver, table_id: str, first: str) -> list[str]:
    for tr in driver.find_elements(By.CSS_SELECTOR, f"table#{table_id} tbody tr"):
        texts = [td.text.strip() for td in tr.find_elements(By.TAG_NAME, "td")]
        if texts and texts[0] == first:
            return texts
    raise AssertionError(f"no row {first!r} in table {table_id}")


def topics(bootstrap: str) -> set[str]:
    from confluent_kafka.admin import AdminClient

    return set(AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics)


def test_console_in_a_browser(
    seeded: Seeded, console: ConsoleProcess, browser: WebDriver, shots: Path
) -> None:
    port = seeded.bootstrap.rsplit(":", 1)[1]
    # the cluster page lists the broker
    visit(browser, console.url)
    broker = cells(browser, "brokers", "1 controller")
    assert broker[1:3] == ["127.0.0.1", port]
    assert cells(browser, "quorum", "1")[1] == "Leader"
    screenshot(browser, shots, "cluster")

    # topics → the topic's page shows its partitions
    visit(browser, f"{console.url}topics")
    browser.find_element(By.LINK_TEXT, seeded.topic).click()
    WebDriverWait(browser, WAIT_S).until(
        expected_conditions.presence_of_element_located((By.ID, "partitions"))
    )
    rows = browser.find_elements(By.CSS_SELECTOR, "table#partitions tbody tr")
    assert len(rows) == 2
    assert cells(browser, "partitions", "0")[5:7] == ["0", str(PRODUCED)]
    screenshot(browser, shots, "topic")

    # the message browser finds the record with a JSON value and a header
    browser.find_element(By.ID, "browse").click()
    form = WebDriverWait(browser, WAIT_S).until(
        expected_conditions.presence_of_element_located((By.ID, "browse-form"))
    )
    Select(form.find_element(By.NAME, "partition")).select_by_value("0")
    offset = form.find_element(By.NAME, "offset")
    offset.clear()
    offset.send_keys("1")
    limit = form.find_element(By.NAME, "limit")
    limit.clear()
    limit.send_keys("5")
    Select(form.find_element(By.NAME, "format")).select_by_value("auto")
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    WebDriverWait(browser, WAIT_S).until(
        expected_conditions.presence_of_element_located((By.ID, "records"))
    )
    record = cells(browser, "records", str(seeded.json_offset))
    assert record[2] == "customer-7"
    assert f'"order": "{seeded.order_id}"' in record[3]
    assert "trace-id" in record[4] and "abc-123" in record[4]
    shown = browser.find_elements(By.CSS_SELECTOR, "table#records tbody tr td:first-child")
    assert [td.text for td in shown] == ["1", "2", "3", "4", "5"]
    screenshot(browser, shots, "messages")

    # the group's lag is what was produced minus what was committed; the chart fills in
    visit(browser, f"{console.url}groups")
    browser.find_element(By.LINK_TEXT, seeded.group).click()
    WebDriverWait(browser, WAIT_S).until(
        expected_conditions.presence_of_element_located((By.ID, "offsets"))
    )
    expected = str(PRODUCED - COMMITTED)
    assert cells(browser, "offsets", seeded.topic)[2:5] == [str(COMMITTED), str(PRODUCED), expected]
    assert browser.find_element(By.ID, "total-lag").text == expected
    deadline = time.monotonic() + WAIT_S
    while not browser.find_elements(By.CSS_SELECTOR, "svg.lag-chart polyline"):
        assert time.monotonic() < deadline, "the lag chart got no samples"
        time.sleep(1.2)  # a few samples, so the chart has a line
        browser.refresh()
    screenshot(browser, shots, "group")

    # create a topic through its confirmation page, then delete it by typing its name
    name = f"from-browser-{uuid.uuid4().hex[:8]}"
    visit(browser, f"{console.url}topics")
    create = browser.find_element(By.ID, "create-topic")
    create.find_element(By.NAME, "name").send_keys(name)
    partitions = create.find_element(By.NAME, "partitions")
    partitions.clear()
    partitions.send_keys("3")
    create.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    confirm = WebDriverWait(browser, WAIT_S).until(
        expected_conditions.presence_of_element_located((By.ID, "confirm-create"))
    )
    assert name not in topics(seeded.bootstrap)  # nothing happens before confirming
    screenshot(browser, shots, "confirm-create")
    confirm.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    WebDriverWait(browser, WAIT_S).until(
        expected_conditions.presence_of_element_located((By.ID, "done"))
    )
    assert browser.find_element(By.ID, "topic-name").text == name
    assert len(browser.find_elements(By.CSS_SELECTOR, "table#partitions tbody tr")) == 3
    assert name in topics(seeded.bootstrap)
    delete = browser.find_element(By.ID, "delete-topic")
    delete.find_element(By.NAME, "confirm_name").send_keys(name)
    delete.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    # The page being left also has a #done (the create's): wait for the new one's text
    # (the condition rides out the old element going stale as the page is replaced).
    WebDriverWait(browser, WAIT_S).until(
        expected_conditions.text_to_be_present_in_element((By.ID, "done"), "deleted topic")
    )
    assert browser.find_element(By.ID, "done").text == f"deleted topic {name}"
    assert name not in topics(seeded.bootstrap)
