"""The limits of ``bmoe-run serve`` (docs/metrics.md "Limits"), each against a real child process on
loopback over raw sockets: the key before the body, the body limit, the header / idle / keep-alive
timeouts, the head size cap, the connection cap, the queue cap, a disconnect cancelling its
generation (streaming and not), ``--api-key-file``, and ``/health`` under the floods.

Nothing here depends on the machine's speed: every wait is for an event (a count on ``/metrics``,
an answer, the server closing a socket) with a deadline that only bounds a failure; the child's
decode is slowed with BMOE_TOKEN_DELAY_MS where a test must act mid-generation. The one latency
check (``/health`` during the floods) allows 1 s per answer, ten times the 100 ms goal that
bench_server.py measures, because a loaded 2-core machine can stall any process for a few hundred
ms; what it proves is that the floods never make /health wait for them.
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import time
from pathlib import Path

import httpx
import orjson
import pytest
from helpers.serve import PY, Raw, Serve, scrape, scrape_value
from helpers.waits import wait_until

from bmoe_top.parsers.audit import check_exact_sum, read_audit_file

KEY = "s3cret-key-from-a-file"
AUTH = {"Authorization": f"Bearer {KEY}"}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    from bmoe_top.runtime.models import make_model

    return make_model(tmp_path_factory.mktemp("models") / "tiny-q8_0.gguf", preset="tiny", qtype="q8_0", seed=0)


@pytest.fixture(scope="module")
def keyfile(tmp_path_factory) -> Path:
    p = tmp_path_factory.mktemp("key") / "api.key"
    p.write_text(f"# bmoe-run serve keys\n{KEY}\n")
    p.chmod(0o600)
    return p


@pytest.fixture(scope="module")
def strict(tiny, keyfile, tmp_path_factory):
    """Small limits and short timeouts; 50 ms per token so a request can be caught mid-decode."""
    audit = tmp_path_factory.mktemp("audit") / "a.jsonl"
    s = Serve(tiny, "--api-key-file", str(keyfile), "--max-body-bytes", "65536", "--max-queue", "1",
              "--timeout-header", "1", "--timeout-idle", "1", "--timeout-keep-alive", "1",
              "--moe-cache-audit", str(audit), env={"BMOE_TOKEN_DELAY_MS": "50"})
    s.audit = audit
    yield s
    s.stop()


def rejected(s, reason: str) -> float:
    return scrape_value(s.url, "bmoe:http_rejected_total", {"reason": reason}, headers=AUTH) or 0.0


def metrics(s):
    return scrape(s.url, headers=AUTH, timeout=30)


def idle(s) -> bool:
    m = metrics(s)
    return m.get("requests_processing") == 0 and m.get("requests_deferred") == 0


def test_api_key_file_keeps_the_key_out_of_ps(strict):
    cmdline = Path(f"/proc/{strict.proc.pid}/cmdline").read_bytes()
    assert KEY.encode() not in cmdline and b"--api-key-file" in cmdline
    assert httpx.get(strict.url + "/metrics", trust_env=False).status_code == 401
    assert httpx.get(strict.url + "/metrics", headers={"X-Api-Key": KEY}, trust_env=False).status_code == 200
    assert httpx.get(strict.url + "/health", trust_env=False).status_code == 200  # never needs the key


def test_bad_key_files_are_one_line(tiny, tmp_path):
    empty = tmp_path / "empty.key"
    empty.write_text("\n# nothing\n")
    for path, why in ((tmp_path / "absent.key", "cannot read --api-key-file"), (empty, "holds no key")):
        r = subprocess.run([PY, "-m", "bmoe_top.runtime.cli", "serve", "-m", str(tiny), "--port", "0",
                            "--api-key-file", str(path)], capture_output=True, text=True, timeout=60)
        assert r.returncode == 2 and why in r.stderr and "Traceback" not in r.stderr
        assert len(r.stderr.strip().splitlines()) == 1


def test_key_is_checked_before_the_body_is_read(strict):
    before = rejected(strict, "auth")
    # a 100 MB upload without a key: only the head is sent, and the answer comes without the body
    raw = Raw(strict.url).send_head("POST", "/completion", {"Content-Length": str(100 << 20),
                                                            "Content-Type": "application/json"})
    status, headers, body = raw.response()
    assert status == 401 and headers["connection"] == "close" and headers["www-authenticate"] == "Bearer"
    assert orjson.loads(body)["error"]["type"] == "authentication_error"
    assert raw.closed_by_server()
    raw.close()
    assert rejected(strict, "auth") == before + 1


def test_body_limit_413_by_length_and_while_chunked(strict):
    before = rejected(strict, "body")
    raw = Raw(strict.url).send_head("POST", "/completion", {**AUTH, "Content-Length": "65537"})
    status, headers, body = raw.response()  # refused on the head: nothing of the body was sent
    assert status == 413 and headers["connection"] == "close" and "65536" in orjson.loads(body)["error"]["message"]
    raw.close()
    raw = Raw(strict.url).send_head("POST", "/v1/completions", {**AUTH, "Transfer-Encoding": "chunked"})
    piece = b"x" * 20000
    for _ in range(4):  # 80,000 bytes, no end chunk: refused once the count passes 65,536
        raw.send(b"%x\r\n" % len(piece) + piece + b"\r\n")
    status, headers, _ = raw.response()
    assert status == 413 and headers["connection"] == "close"
    raw.close()
    assert rejected(strict, "body") == before + 2


def test_header_idle_and_keep_alive_timeouts(strict):
    t0 = rejected(strict, "timeout")
    # a head that never ends (slowloris): 408 and closed
    raw = Raw(strict.url).send(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: ")
    status, headers, _ = raw.response()
    assert status == 408 and headers["connection"] == "close" and raw.closed_by_server()
    raw.close()
    # a body that stops arriving: 408
    raw = Raw(strict.url).send_head("POST", "/completion", {**AUTH, "Content-Length": "1000"}).send(b'{"prompt"')
    status, _, body = raw.response()
    assert status == 408 and "nothing received" in orjson.loads(body)["error"]["message"]
    raw.close()
    # a connection that never sends a byte, and one idle after its answer: closed
    raw = Raw(strict.url)
    assert raw.closed_by_server()
    raw.close()
    raw = Raw(strict.url).send_head("GET", "/health")
    assert raw.response()[0] == 200
    assert raw.closed_by_server()
    raw.close()
    assert rejected(strict, "timeout") == t0 + 2


def test_head_size_cap_431(strict):
    raw = Raw(strict.url).send(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"p" * (70 << 10))
    status, headers, _ = raw.response()
    assert status == 431 and headers["connection"] == "close"
    raw.close()


@pytest.mark.parametrize("split", [None, 60 << 10, 40 << 10])
@pytest.mark.parametrize("shape", ["one header", "many headers"])
def test_a_whole_head_over_64_kib_is_431_however_it_arrives(strict, split, shape):
    # a 70 KB head that ends in the read that passes the cap was accepted: only an incomplete
    # head was counted, read by read
    pad = (b"X-Pad: " + b"p" * (70 << 10) + b"\r\n" if shape == "one header"
           else b"".join(b"X-Pad-%d: %s\r\n" % (i, b"p" * 1000) for i in range(72)))
    head = b"GET /health HTTP/1.1\r\nHost: x\r\n" + pad + b"\r\n"
    t0 = rejected(strict, "header")
    raw = Raw(strict.url)
    if split is None:
        raw.send(head)
    else:
        raw.send(head[:split]).send(head[split:])
    status, headers, body = raw.response()
    assert status == 431 and headers["connection"] == "close" and b"request head larger than 65536 bytes" in body
    raw.close()
    assert rejected(strict, "header") == t0 + 1


def test_a_small_head_with_a_large_body_in_one_write_is_not_a_large_head(strict):
    body = b'{"prompt": "' + b"w " * 25000 + b'", "n_predict": 0}'
    raw = Raw(strict.url).send(b"POST /completion HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + KEY.encode()
                              + b"\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
                              + body)
    status, _headers, _body = raw.response()
    assert status != 431  # 50 KB of body after a 100-byte head (the prompt itself may not fit n_ctx: 400)
    raw.close()


def test_queue_cap_503_and_disconnects_cancel(strict):
    n0 = scrape_value(strict.url, "bmoe:requests_cancelled_total", headers=AUTH)
    runs0 = read_audit_file(strict.audit).runs[-1]
    n_req0 = len(runs0.requests)
    # a: generating (>= 20 s at 50 ms per token), b: queued (--max-queue 1), c: refused
    a = Raw(strict.url).post_json("/completion", {"prompt": "request a", "n_predict": 400}, AUTH)
    wait_until(lambda: metrics(strict).get("requests_processing") == 1, what="a runs")
    b = Raw(strict.url).post_json("/v1/completions", {"prompt": "request b", "max_tokens": 400}, AUTH)
    wait_until(lambda: metrics(strict).get("requests_deferred") == 1, what="b is queued")
    q0 = rejected(strict, "queue")
    r = httpx.post(strict.url + "/v1/chat/completions", headers=AUTH, trust_env=False, timeout=30,
                   json={"messages": [{"role": "user", "content": "c"}], "max_tokens": 4})
    assert r.status_code == 503 and r.headers["retry-after"] == "1"
    assert r.json()["error"]["type"] == "unavailable_error" and rejected(strict, "queue") == q0 + 1
    b.close()  # b's client hangs up while queued: dropped, never generated
    wait_until(lambda: metrics(strict).get("requests_deferred") == 0, what="b left the queue")
    assert metrics(strict).get("requests_processing") == 1
    a.close()  # a's client hangs up mid-decode (non-streaming): its generation stops
    wait_until(lambda: idle(strict), what="a cancelled")
    assert scrape_value(strict.url, "bmoe:requests_cancelled_total", headers=AUTH) == n0 + 2
    run = read_audit_file(strict.audit).runs[-1]
    assert len(run.requests) == n_req0 + 1  # a's record (cut short); b never started: none
    assert 0 < run.requests[-1].data["n_gen"] < 400


@pytest.mark.parametrize("path,body", [
    ("/completion", {"prompt": "stream a", "n_predict": 400, "stream": True}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "stream b"}], "max_tokens": 400,
                              "stream": True}),
])
def test_streaming_client_that_disconnects_cancels(strict, path, body):
    tok0 = metrics(strict).get("tokens_predicted")
    raw = Raw(strict.url).post_json(path, body, AUTH)
    while raw.buf.count(b"\ndata: ") + raw.buf.startswith(b"data: ") < 3:
        assert raw._fill(), "stream closed early"
    assert b"text/event-stream" in raw.buf.split(b"\r\n\r\n", 1)[0]
    raw.close()
    wait_until(lambda: idle(strict), what="the stream's generation cancelled")
    assert 0 < metrics(strict).get("tokens_predicted") - tok0 < 400


def test_connection_cap_503_but_health_answers(tiny):
    s = Serve(tiny, "--max-connections", "8", "--timeout-keep-alive", "120", "--timeout-header", "120")
    held: list[Raw] = []
    try:
        held += [Raw(s.url) for _ in range(7)]
        # 7 idle + the scrape's own connection = 8: at the cap, still served
        wait_until(lambda: scrape_value(s.url, "bmoe:http_connections") == 8, what="7 idle connections counted")
        held += [Raw(s.url) for _ in range(2)]

        def refused() -> httpx.Response | None:
            r = httpx.get(s.url + "/metrics", trust_env=False, timeout=30)
            return r if r.status_code == 503 else None

        r = wait_until(refused, what="over the cap: 503")
        assert r.headers["retry-after"] == "1" and r.headers["connection"] == "close"
        assert "connection limit" in r.json()["error"]["message"]
        assert httpx.post(s.url + "/completion", json={"prompt": "x", "n_predict": 1}, trust_env=False,
                          timeout=30).status_code == 503
        assert httpx.get(s.url + "/health", trust_env=False, timeout=30).status_code == 200
        for h in held:
            h.close()
        held.clear()
        wait_until(lambda: httpx.get(s.url + "/metrics", trust_env=False, timeout=30).status_code == 200,
                   what="below the cap again")
        assert scrape_value(s.url, "bmoe:http_rejected_total", {"reason": "connections"}) >= 2
    finally:
        for h in held:
            h.close()
        assert s.stop() == 0


def test_health_answers_under_idle_and_upload_floods_and_decode(tiny, keyfile):
    n_idle = 1000
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < n_idle + 200:
        pytest.skip(f"the open-file limit ({hard}) is below {n_idle + 200}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, n_idle + 200) if hard == resource.RLIM_INFINITY
                                                else max(soft, min(hard, n_idle + 200)), hard))
    s = Serve(tiny, "--api-key-file", str(keyfile), "--max-connections", "2000", "--timeout-keep-alive", "300",
              "--timeout-header", "300", "--timeout-idle", "300", env={"BMOE_TOKEN_DELAY_MS": "20"})
    held: list[Raw] = []
    try:
        held += [Raw(s.url) for _ in range(n_idle)]
        # five 100 MB uploads without a key (refused on their head) and five with it, stalled mid-body
        for _ in range(5):
            held.append(Raw(s.url).send_head("POST", "/completion", {"Content-Length": str(100 << 20)}))
            held.append(Raw(s.url).send_head("POST", "/completion", {**AUTH, "Content-Length": "60000"})
                        .send(b'{"prompt": "' + b"u" * 30000))
        gen = Raw(s.url).post_json("/completion", {"prompt": "decoding meanwhile", "n_predict": 400}, AUTH)
        held.append(gen)
        wait_until(lambda: (scrape_value(s.url, "bmoe:http_connections", headers=AUTH) or 0) >= n_idle + 5,
                   what="the idle flood is accepted")
        wait_until(lambda: (scrape(s.url, headers=AUTH).get("tokens_predicted") or 0) > 0, what="a decode runs")
        with httpx.Client(trust_env=False, timeout=1.0) as c:  # a new connection each time: accept() is tested too
            for _ in range(20):
                assert c.get(s.url + "/health", headers={"Connection": "close"}).status_code == 200
    finally:
        for h in held:
            h.close()
        assert s.stop() == 0


def test_audit_symlink_and_bad_path_refused_at_start(tiny, tmp_path):
    target = tmp_path / "precious.txt"
    target.write_text("keep me\n")
    link = tmp_path / "audit.jsonl"
    link.symlink_to(target)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path, why in ((link, "symbolic link"), (fifo, "named pipe"), (tmp_path, "it is a directory"),
                      (tmp_path / "no" / "dir" / "a.jsonl", "the folder does not exist")):
        r = subprocess.run([PY, "-m", "bmoe_top.runtime.cli", "serve", "-m", str(tiny), "--port", "0",
                            "--moe-cache-audit", str(path)], capture_output=True, text=True, timeout=60)
        assert r.returncode == 1 and why in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert target.read_text() == "keep me\n"


def test_csv_sink_refuses_what_it_would_overwrite_and_writes_one_row_per_token(tiny, tmp_path):
    existing = tmp_path / "run.csv"
    existing.write_text("keep me\n")
    r = subprocess.run([PY, "-m", "bmoe_top.runtime.cli", "serve", "-m", str(tiny), "--port", "0",
                        "--csv", str(existing)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "already exists" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert existing.read_text() == "keep me\n"
    csv = tmp_path / "serve.csv"
    s = Serve(tiny, "--cache-mb", "0.5", "--csv", str(csv))
    try:
        for i, n in enumerate((5, 7)):
            assert httpx.post(s.url + "/completion", json={"prompt": f"request {i}", "n_predict": n},
                              trust_env=False, timeout=60).status_code == 200
        tokens = scrape(s.url).values["tokens_predicted"]
    finally:
        assert s.stop() == 0
    lines = csv.read_text().splitlines()
    rows = [ln for ln in lines if ln and not ln.startswith("#")][1:]  # after the column names
    assert len(rows) == tokens and sum(ln.startswith("# summary ") for ln in lines) == 2


def test_serve_csv_carries_the_process_columns_and_its_summary_reads_them(tiny, tmp_path):
    """The serve CSV's rss_mib/majflt/cpu_ms are measured as the one-shot's are (no -1 placeholder
    read back as 'impossible values'), so the replay summary shows measured per-token figures."""
    csv = tmp_path / "serve.csv"
    s = Serve(tiny, "--cache-mb", "0.5", "--csv", str(csv))
    try:
        assert httpx.post(s.url + "/completion", json={"prompt": "hello", "n_predict": 4},
                          trust_env=False, timeout=60).status_code == 200
    finally:
        assert s.stop() == 0
    lines = [ln for ln in csv.read_text().splitlines() if ln and not ln.startswith("#")]
    cols = lines[0].split(",")
    rows = [dict(zip(cols, ln.split(","), strict=True)) for ln in lines[1:]]
    assert len(rows) == 4
    for row in rows:
        assert float(row["rss_mib"]) > 0 and int(row["majflt"]) >= 0 and float(row["cpu_ms"]) >= 0, row
    r = subprocess.run([PY, "-m", "bmoe_top.tui.cli", "replay", "--summary", str(csv)], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0 and "impossible" not in r.stdout + r.stderr, r.stdout + r.stderr
    assert "problems: 0" in r.stdout and "majflt/token" in r.stdout and "cpu/token" in r.stdout, r.stdout


def test_csv_of_an_engine_without_process_figures_leaves_them_absent(tiny, tmp_path):
    """An engine built without ``process_stats`` measures no RSS, faults or CPU: its CSV leaves those
    cells empty and its summary line leaves out majflt/tok and cpu_s/tok (absent, never 0)."""
    from bmoe_top.runtime.engine import Engine
    from bmoe_top.runtime.telemetry import CsvSink

    csv = tmp_path / "run.csv"
    with Engine(tiny, n_ctx=256, n_threads=1, cache_mb=0.5) as eng:
        sink = CsvSink(str(csv), eng, {"n_predict": 3})
        res = eng.generate("hello", 3, on_token=sink.row)
        sink.summary(eng, res)
        sink.close()
    lines = [ln for ln in csv.read_text().splitlines() if ln and not ln.startswith("#")]
    cols = lines[0].split(",")
    rows = [dict(zip(cols, ln.split(","), strict=True)) for ln in lines[1:]]
    assert rows and all(row["rss_mib"] == row["majflt"] == row["cpu_ms"] == "" for row in rows), rows
    summary = next(ln for ln in csv.read_text().splitlines() if ln.startswith("# summary "))
    assert "majflt/tok=" not in summary and "cpu_s/tok=" not in summary and "tokens=3" in summary, summary
    r = subprocess.run([PY, "-m", "bmoe_top.tui.cli", "replay", "--summary", str(csv)], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0 and "impossible" not in r.stdout + r.stderr, r.stdout + r.stderr
    shown = {ln.split()[0]: ln for ln in r.stdout.splitlines() if ln.startswith("  ")}
    assert " 0" not in shown.get("majflt/token", "") and " 0 ms" not in shown.get("cpu/token", ""), r.stdout


def test_audit_write_error_is_loud_and_exits_1(tiny, tmp_path):
    audit = tmp_path / "a.jsonl"
    audit.write_bytes(b"")

    def small_files():  # the child may write 3 KiB: the load and ready records fit, requests soon do not
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (3072, 3072))

    s = Serve(tiny, "--cache-mb", "0.5", "--moe-cache-audit", str(audit), preexec_fn=small_files)
    try:
        for i in range(12):
            r = httpx.post(s.url + "/completion", json={"prompt": f"request {i}", "n_predict": 4},
                           trust_env=False, timeout=60)
            assert r.status_code == 200  # the server keeps answering
        wait_until(lambda: any("cannot write the audit log" in ln for ln in s.err_lines), what="the error shown")
    finally:
        rc = s.stop()
    assert rc == 1
    err = [ln for ln in s.err_lines if "cannot write the audit log" in ln]
    assert "exits with status 1" in err[0] and "Traceback" not in "".join(s.err_lines)
    recs = read_audit_file(audit)
    assert recs.bad == [] and os.path.getsize(audit) <= 3072  # whole records only, never a torn line
    assert recs.runs[0].load is not None


def test_cancelled_requests_keep_the_exact_sum(strict):
    # runs last in this module: after the cancellations above the records still add up at exit
    assert strict.stop() == 0
    run = read_audit_file(strict.audit).runs[-1]
    assert run.exit is not None and len(run.requests) >= 3 and check_exact_sum(run) == []


def _limit_lines(s: Serve) -> list[str]:
    return [ln for ln in s.err_lines if "open-file limit" in ln or "EMFILE" in ln]


def test_health_answers_at_the_open_file_limit(tiny):
    # a hard limit of 256 descriptors and 600 idle connections: the longest idle ones are closed
    # to keep accepting, said once a second (the loop used to log 2,048 tracebacks per failed
    # accept batch, 190 MB in 100 s, and /health never got a descriptor)
    def few_files():
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))

    s = Serve(tiny, "--timeout-keep-alive", "300", "--timeout-header", "300", preexec_fn=few_files)
    held: list[Raw] = []
    try:
        held += [Raw(s.url) for _ in range(600)]
        with httpx.Client(trust_env=False, timeout=5.0) as c:
            for _ in range(20):
                assert c.get(s.url + "/health", headers={"Connection": "close"}).status_code == 200
        n_conn = scrape_value(s.url, "bmoe:http_connections")
        assert n_conn is not None and n_conn < 256
        lines = wait_until(lambda: [ln for ln in _limit_lines(s) if "closed" in ln], what="the limit said")
        assert "idle connection" in lines[0] and "(the longest idle) to keep accepting" in lines[0]
    finally:
        for h in held:
            h.close()
        assert s.stop() == 0
    assert "Traceback" not in "".join(s.err_lines) and len(_limit_lines(s)) <= 10


def test_emfile_from_a_lowered_limit_is_one_line_a_second(tiny):
    s = Serve(tiny, "--timeout-keep-alive", "300", "--timeout-header", "300")
    held: list[Raw] = []
    try:
        n = len(os.listdir(f"/proc/{s.proc.pid}/fd"))
        resource.prlimit(s.proc.pid, resource.RLIMIT_NOFILE, (n + 200, n + 200))  # under the budget it counted
        t0 = time.monotonic()
        held += [Raw(s.url) for _ in range(600)]
        with httpx.Client(trust_env=False, timeout=30.0) as c:
            for _ in range(20):
                assert c.get(s.url + "/health", headers={"Connection": "close"}).status_code == 200
        wait_until(lambda: any("EMFILE" in ln for ln in s.err_lines), what="the EMFILE line")
        took = time.monotonic() - t0
        emfile = [ln for ln in s.err_lines if "EMFILE" in ln]
        assert len(emfile) <= took + 2  # once a second at most, each with its count
        assert emfile[0].startswith("bmoe-run serve: cannot accept connections: out of file descriptors (EMFILE); ")
    finally:
        for h in held:
            h.close()
        assert s.stop() == 0
    assert "Traceback" not in "".join(s.err_lines) and sum(map(len, s.err_lines)) < 20_000
