"""The dashboard's pages and data endpoints, through the app with its embedded executor."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from factories import chain, offloading_plan, store_offload_job
from fastapi.testclient import TestClient
from processes import wait_until
from pydantic import SecretStr

from remat.report import ASSETS, PLOTLY_VERSION
from remat.schedules import Transfer, format_size, simulate
from remat.service import Settings, create_app

STRATEGIES = ["checkpoint-all", "checkpoint-last", "chen-sqrtn"]
TOKEN = "dashboard-test-token-0123456789"


def page_data(html: str) -> dict:
    found = re.search(r'<script type="application/json" id="page-data">(.*?)</script>', html, re.S)
    assert found, "the page carries its data"
    return json.loads(found.group(1))


def finished_sweep(client: TestClient, **headers: str) -> dict:
    graph = chain(8, memory=2**20)
    body = {"graph": graph.to_json(), "strategies": STRATEGIES}
    sweep = client.post("/v1/sweeps", json=body, headers=headers).json()
    return wait_until(lambda: (s := client.get(f"/v1/sweeps/{sweep['id']}", headers=headers).json())["status"]
                      == "succeeded" and s, timeout_s=120)


def test_the_sweep_page_has_a_trace_per_strategy_and_the_table(client: TestClient):
    sweep = finished_sweep(client)
    r = client.get(f"/dashboard/sweeps/{sweep['id']}")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    data = page_data(r.text)
    assert [t["name"] for t in data["figures"]["curves"]["data"]] == STRATEGIES
    assert data["poll"] is None, "a finished sweep is not polled"
    assert r.text.count('<td class="cell') == len(sweep["jobs"])
    for job in sweep["jobs"]:
        assert f'href="/dashboard/jobs/{job["id"]}"' in r.text
    assert ASSETS["plotly.js"].url in r.text and "cdn" not in r.text.lower()
    update = client.get(f"/dashboard/sweeps/{sweep['id']}/data").json()
    assert update["figures"] == data["figures"] and "<table" in update["html"]["sweep-table"]


def test_a_running_sweep_page_polls_until_it_ends(client: TestClient):
    graph = chain(30, memory=2**20)
    body = {"graph": graph.to_json(), "strategies": ["checkpoint-all", "checkpoint-last", "linearized-greedy"]}
    sweep = client.post("/v1/sweeps", json=body).json()
    first = page_data(client.get(f"/dashboard/sweeps/{sweep['id']}").text)
    assert first["poll"] == f"/dashboard/sweeps/{sweep['id']}/data" or sweep["status"] == "succeeded"
    last = wait_until(lambda: (u := client.get(f"/dashboard/sweeps/{sweep['id']}/data").json())["poll"] is None and u,
                      timeout_s=120)
    assert "points done" in last["html"]["sweep-progress"] and "updating live" not in last["html"]["sweep-progress"]
    assert all(t["x"] for t in last["figures"]["curves"]["data"])


def test_the_job_page_draws_the_plan(client: TestClient):
    sweep = finished_sweep(client)
    job = next(j for j in sweep["jobs"] if j["strategy"] == "checkpoint-last")
    r = client.get(f"/dashboard/jobs/{job['id']}")
    assert r.status_code == 200
    data = page_data(r.text)
    assert set(data["figures"]) == {"memory", "recompute", "R", "S"} and data["poll"] is None
    assert "arena size" in r.text and "recomputations" in r.text
    assert data["figures"]["memory"]["data"][1]["y"][0] == job["budget"] / 2**20  # MiB axis
    assert client.get(f"/dashboard/jobs/{job['id']}/data").json()["reload"] is True


def test_the_front_page_lists_sweeps_and_jobs(client: TestClient):
    sweep = finished_sweep(client)
    r = client.get("/dashboard")
    assert r.status_code == 200
    assert f'href="/dashboard/sweeps/{sweep["id"]}"' in r.text
    assert all(f'href="/dashboard/jobs/{j["id"]}"' in r.text for j in sweep["jobs"])
    assert "overhead" in r.text


def test_unknown_sweeps_and_jobs_are_404(client: TestClient):
    assert client.get("/dashboard/sweeps/nope").status_code == 404
    assert client.get("/dashboard/jobs/nope").status_code == 404
    assert client.get("/dashboard/static/nope.js").status_code == 404


def test_assets_are_vendored_and_cached_for_long():
    plotly = ASSETS["plotly.js"]
    assert hashlib.sha256(plotly.content).hexdigest() == \
        "79542150855a52c567260e3137095dbe2b744e6d702a5cabe67da246942fba7a"
    assert plotly.content.startswith(f"/**\n* plotly.js (cartesian - minified) v{PLOTLY_VERSION}".encode())
    assert b"MIT License" in ASSETS["plotly-LICENSE.txt"].content


def test_assets_are_served_with_their_digest(client: TestClient):
    r = client.get(ASSETS["dashboard.js"].url)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/javascript")
    assert "immutable" in r.headers["cache-control"] and r.content == ASSETS["dashboard.js"].content


def test_inlined_text_cannot_close_its_element(tmp_path: Path):
    from remat.report import Asset

    path = tmp_path / "x.js"
    path.write_text('var s = "</script><script>alert(1)</SCRIPT>";')
    assert "</script" not in Asset("x.js", path, "text/javascript").inline_text().lower()


@pytest.fixture
def secured(settings: Settings) -> Iterator[TestClient]:
    settings = settings.model_copy(update={"tokens": [SecretStr(TOKEN)]})
    with TestClient(create_app(settings), raise_server_exceptions=False) as c:
        yield c


def test_with_authentication_a_browser_gets_the_sign_in_form(secured: TestClient):
    r = secured.get("/dashboard/sweeps/abc", headers={"Accept": "text/html"})
    assert r.status_code == 401 and '<form method="post" action="/dashboard/login"' in r.text
    assert 'name="next" value="/dashboard/sweeps/abc"' in r.text
    data = secured.get("/dashboard/sweeps/abc/data", headers={"Accept": "application/json"})
    assert data.status_code == 401 and data.headers["content-type"] == "application/problem+json"
    assert secured.get(ASSETS["plotly.js"].url).status_code == 200, "assets need no token"


def _issued_form(client: TestClient, path: str = "/dashboard") -> str:
    """The hidden form value of the sign-in form a browser gets on ``path`` (its cookie is now in ``client``)."""
    r = client.get(path, headers={"Accept": "text/html"})
    assert r.status_code == 401 and "remat_csrf=" in r.headers["set-cookie"]
    found = re.search(r'name="csrf" value="([^"]+)"', r.text)
    assert found, "the form carries its value"
    return found.group(1)


def test_the_sign_in_form_sets_a_cookie_for_the_dashboard_only(secured: TestClient):
    bad = secured.post("/dashboard/login", data={"token": "wrong-token-wrong-token", "next": "/dashboard",
                                                 "csrf": _issued_form(secured)}, follow_redirects=False)
    assert bad.status_code == 401 and "not valid" in bad.text and "remat_token" not in bad.headers["set-cookie"]
    r = secured.post("/dashboard/login", data={"token": TOKEN, "next": "/dashboard", "csrf": _issued_form(secured)},
                     follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/dashboard"
    cookie = next(c for c in r.headers.get_list("set-cookie") if c.startswith("remat_token="))
    assert "HttpOnly" in cookie and "Path=/dashboard" in cookie and "samesite=strict" in cookie.lower()
    assert secured.get("/dashboard").status_code == 200
    assert secured.get("/v1/jobs").status_code == 401, "the API never takes the cookie"


@pytest.mark.parametrize("forged", [{}, {"csrf": "made-up"}], ids=["no-form-value", "another-value"])
def test_a_sign_in_from_a_form_the_dashboard_did_not_issue_is_refused(secured: TestClient, forged: dict):
    """Login CSRF: another site posts its own token from its own form; the browser must not be signed in."""
    if forged:
        _issued_form(secured)  # the browser holds a form value of its own, which the forged post does not know
    r = secured.post("/dashboard/login", data={"token": TOKEN, "next": "/dashboard", **forged},
                     follow_redirects=False)
    assert r.status_code == 403 and 'name="csrf"' in r.text
    assert "remat_token" not in r.headers.get("set-cookie", "")
    assert secured.get("/dashboard").status_code == 401


def test_a_token_link_does_not_sign_in(secured: TestClient):
    r = secured.get(f"/dashboard?token={TOKEN}&x=1", headers={"Accept": "text/html"}, follow_redirects=False)
    assert r.status_code == 401 and "remat_token" not in r.headers.get("set-cookie", "")
    assert secured.get("/dashboard").status_code == 401


def test_sign_in_goes_on_only_to_dashboard_pages(secured: TestClient):
    r = secured.post("/dashboard/login", data={"token": TOKEN, "next": "https://evil.example/",
                                               "csrf": _issued_form(secured)}, follow_redirects=False)
    assert r.headers["location"] == "/dashboard"


@pytest.mark.parametrize("path", ["/dashboard", "/dashboard/jobs/abc", "/", "/v1/jobs", "/dashboard/static/x"])
def test_every_page_sends_the_security_headers(secured: TestClient, path: str):
    r = secured.get(path, headers={"Accept": "text/html"})
    assert r.headers["x-frame-options"] == "DENY" and r.headers["x-content-type-options"] == "nosniff"
    assert r.headers["referrer-policy"] == "no-referrer"
    policy = r.headers["content-security-policy"]
    assert "frame-ancestors 'none'" in policy and "script-src 'self'" in policy and "unsafe-eval" not in policy


def test_the_api_documentation_keeps_its_cdn_scripts(secured: TestClient):
    r = secured.get("/docs")
    assert r.status_code == 200 and "content-security-policy" not in r.headers and r.headers["x-frame-options"]


def test_a_bearer_header_works_too(secured: TestClient):
    auth = {"Authorization": f"Bearer {TOKEN}"}
    sweep = finished_sweep(secured, **auth)
    assert secured.get(f"/dashboard/sweeps/{sweep['id']}", headers=auth).status_code == 200


def test_the_root_links_the_dashboard(client: TestClient):
    page = client.get("/", headers={"Accept": "text/html"})
    assert page.status_code == 200 and 'href="/dashboard"' in page.text and 'href="/docs"' in page.text
    links = client.get("/", headers={"Accept": "application/json"}).json()["links"]
    assert links["dashboard"] == "/dashboard" and client.get(links["dashboard"]).status_code == 200


def test_the_job_page_of_a_plan_with_transfers_draws_its_streams_and_memory_over_time(settings: Settings):
    graph = chain(8, memory=2**20)
    transfer = Transfer(bandwidth=2**19, latency=0.1)  # a copy lasts 2.1: longer than a compute
    job_id = store_offload_job(settings.data_dir, graph, transfer)
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        r = client.get(f"/dashboard/jobs/{job_id}")
    assert r.status_code == 200, r.text
    data = page_data(r.text)
    assert set(data["figures"]) == {"streams", "memory", "recompute"}, "no R and S: the plan has no schedule"
    lanes = {t["y"][0]: t for t in data["figures"]["streams"]["data"]}
    sim = simulate(graph, offloading_plan(graph), transfer=transfer)
    for op in ("compute", "offload", "reload"):
        spans = sim.timing.stream(op)
        assert lanes[op]["base"] == [s.start for s in spans] and len(lanes[op]["x"]) == len(spans) > 0
    memory = data["figures"]["memory"]["data"][0]
    assert memory["x"] == [t for t, _ in sim.timing.memory] and max(memory["y"]) * 2**20 == sim.peak_memory
    assert "Streams over time" in r.text and "Device memory over time" in r.text
    assert f"host peak memory</dt><dd>{format_size(sim.host_peak_memory)}" in r.text
    assert f"{len(sim.timing.stream('offload'))} offloads" in r.text and "arena size" in r.text
