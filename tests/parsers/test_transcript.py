"""Whole captures (progress / session / no-progress / log / sidecar), session requests, sniffing."""

from __future__ import annotations

import codecs

import orjson
import pytest
from helpers import FIXTURES

from bmoe_top.parsers.bmoe_lines import Begin, Done, Error, Load, Progress, Ready, Resident, Route, Unknown
from bmoe_top.parsers.requests import parse_requests
from bmoe_top.parsers.sniff import sniff
from bmoe_top.parsers.transcript import is_loader_noise, parse_transcript, split_reasoning

FIX = FIXTURES / "parsers"


def test_progress_capture():
    tr = parse_transcript((FIX / "progress_run.txt").read_bytes())
    assert [type(r) for r in tr.records] == [Load, Progress, Load, Progress, Progress, Progress]
    assert tr.record_lines == [2, 3, 4, 5, 6, 7]
    assert tr.answer == "Experts are picked\nby the router é 😀"
    assert tr.generations[0]["answer"] == tr.answer  # BMOE text and the banner block agree
    s = tr.summary
    assert (s["tokens"], s["tok_s"], s["n_prompt"], s["ttft_s"]) == (4, 6.612, 9, 4.75)
    assert (s["mgmt_s_tok"], s["budget_mib"], s["prefetch_useful"], s["prefetch_total"]) == (0.006, 512, 5, 8)
    assert s["spec_recall_pct"] == 71 and s["spec_auto_disabled_below_pct"] == 50
    assert s["stall_s_tok"] == 0.004
    assert tr.problems == []
    assert tr.text_lines[0].startswith("bmoe: expert streaming ON")


def test_session_capture():
    tr = parse_transcript((FIX / "session_run.txt").read_bytes())
    kinds = [type(r) for r in tr.records]
    assert kinds == [Ready, Begin, Progress, Route, Progress, Progress, Resident, Unknown, Done, Error]
    ready = tr.records[0]
    assert ready.prefix == "loader noise without newline " and ready.extra == {"dense_resident_frac": 0.85}
    assert "loader noise without newline " in tr.text_lines
    assert tr.records[5].io_ms is None
    # two problems: the wrong-typed step and the truncated DONE at EOF, with their line numbers
    assert [(p.lineno, "step" in p.reason or "malformed" in p.reason) for p in tr.problems] == [
        (11, True), (14, True)]
    g = tr.generations[0]
    assert g["id"] == 7 and g["answer"] == "Hi there 😀!" and g["reasoning"] == "thinking"
    assert isinstance(g["done"], Done)
    assert tr.answer == "Hi there 😀!" and tr.reasoning == "thinking"
    assert tr.summary["tokens"] == 3 and tr.summary["cache_hit_pct"] == -1
    assert tr.summary["resident_mib"] == 12.5 and tr.summary["n_prompt"] == 5


def test_noprogress_output_prompt_reasoning_answer_summary_sidecar():
    tr = parse_transcript((FIX / "noprogress.out").read_bytes())
    assert tr.prompt == "Why is the sky blue?"
    assert tr.reasoning == "Rayleigh scattering, shorter wavelengths."
    assert tr.answer == "Because air scatters blue light more.\nx=5 is not a sidecar here"
    assert tr.summary["tokens"] == 12 and tr.summary["stall_s_tok"] == 0.01
    assert tr.summary["cache_rereads"] == 6
    assert tr.sidecar == {"peak_rss_kb": "123456", "cpu_temp_max_mC": "70200"}
    assert [p.lineno for p in tr.problems] == [12]  # moe-mystery: reported, not lost
    assert "moe-mystery: 12 widgets" in tr.text_lines


def test_loader_log_with_prompt_echo_and_noise_glued_to_answer():
    log = ("Tell me a fact.llama_model_loader: loaded meta data with 3 key-value pairs\n"
           "print_info: file type   = Q4_K - Medium\n"
           "...................................\n"
           "bmoe: expert streaming ON  n_expert=8\n"
           "The fact: honey never spoils.\n"
           "It lasts.llama_context: CPU compute buffer size is 12 MiB\n"
           "\n"
           "generation: 5 tokens, 0.100 s/token (10.000 tok/s)\n")
    tr = parse_transcript(log.encode())
    assert tr.prompt == "Tell me a fact."
    assert tr.answer == "The fact: honey never spoils.\nIt lasts."
    assert tr.summary == {"tokens": 5, "s_per_tok": 0.1, "tok_s": 10.0}


def test_a_destructor_log_line_glued_to_the_answer_leaves_no_tilde():
    # llama.cpp's ~llama_context destructor logs at exit, glued to the last answer line (real run 2026-07-15)
    log = ("Explain.llama_model_loader: loaded meta data with 3 key-value pairs\n"
           "### 1. Gate Network\n-~llama_context:        CPU compute buffer size is 1219.0 MiB\n"
           "\ngeneration: 3 tokens, 0.100 s/token (10.000 tok/s)\n")
    tr = parse_transcript(log.encode())
    assert tr.answer == "### 1. Gate Network\n-"


def test_sidecar_only_file():
    tr = parse_transcript((FIX / "device.metrics").read_bytes())
    assert tr.sidecar == {"peak_rss_kb": "5949324", "mem_avail_floor_kb": "3961764",
                          "batt_temp_max_dC": "409"}
    assert tr.answer == "" and tr.summary == {}


@pytest.mark.parametrize("bom,enc,nl", [(codecs.BOM_UTF8, "utf-8", "\r\n"),
                                        (codecs.BOM_UTF16_LE, "utf-16-le", "\n")])
def test_encodings(bom, enc, nl):
    text = (FIX / "progress_run.txt").read_text(encoding="utf-8").replace("\n", nl).rstrip()
    tr = parse_transcript(bom + text.encode(enc))
    assert len(tr.records) == 6 and tr.answer.endswith("é 😀") and tr.summary["tokens"] == 4


def test_answer_banner_without_perf_banner_ends_at_first_summary_line():
    tr = parse_transcript("=== answer ===\nline 1\ngeneration: 2 tokens, 0.5 s/token (2.0 tok/s)\n")
    assert tr.answer == "line 1" and tr.summary["tokens"] == 2


def test_summary_looking_lines_inside_the_answer_block_are_answer():
    tr = parse_transcript("=== answer ===\nmode: think step by step\n=== perf ===\n"
                          "generation: 2 tokens, 0.5 s/token (2.0 tok/s)\n")
    assert tr.answer == "mode: think step by step" and "mode" not in tr.info


def test_split_reasoning_and_loader_noise():
    assert split_reasoning("a<think>b</think>c") == ("ac", "b")
    assert split_reasoning("<think>\nunfinished") == ("", "unfinished")
    assert split_reasoning("plain") == ("plain", "")
    assert is_loader_noise("llama_model_loader: - kv   0: general.architecture str = qwen3moe")
    assert is_loader_noise("........")
    assert not is_loader_noise("The answer: 42")


# ------------------------------------------------------------------------------------- requests

def test_requests():
    reqs, problems = parse_requests((FIX / "requests.jsonl").read_bytes())
    assert [r.cmd for r in reqs] == ["generate", "generate", "cancel", "close"]
    r0 = reqs[0]
    assert (r0.id, r0.n_predict, r0.think, r0.clear_kv) == (0, 64, False, True)
    assert r0.prompt == 'Line one\nline two: "quoted"'
    assert reqs[1].n_predict is None and reqs[1].think is None and reqs[1].extra == {"priority": 3}
    assert [(p.lineno, p.reason.split(":")[0]) for p in problems] == [
        (5, "field 'id'"), (6, "malformed JSON")]


# ---------------------------------------------------------------------------------------- sniff

@pytest.mark.parametrize("name,kind", [
    ("progress_run.txt", "transcript"), ("session_run.txt", "transcript"),
    ("noprogress.out", "transcript"), ("tokens_two_turns.csv", "token_csv"),
    ("route_small.csv", "route_trace"), ("requests.jsonl", "requests"),
    ("device.metrics", "sidecar"),
])
def test_sniff_fixtures_by_content_not_name(name, kind):
    data = (FIX / name).read_bytes()
    assert sniff(data, name) == kind
    assert sniff(data, "misleading.bin") == kind


def test_sniff_other_kinds():
    rec = b"".join(orjson.dumps({"t": 1.7e9 + i, "src": "stdout", "line": f"BMOE_BEGIN {{\"id\":{i}}}"}) + b"\n"
                   for i in range(3))
    assert sniff(rec) == "recording"
    audit = orjson.dumps({"event": "load", "time": "2026-01-01T00:00:00.000Z", "pid": 1}) + b"\n"
    assert sniff(audit) == "audit"
    assert sniff(b"STRP\x01\x00\x00\x00" + bytes(16)) == "strp"
    assert sniff(b"\x00\x01\x02binary") == "unknown"
    assert sniff(b"") == "unknown" and sniff(b"", "x.csv") == "token_csv"
    assert sniff(b"just some prose\nmore prose\n") == "unknown"
    assert sniff(b"just some prose\n", "run.log") == "transcript"
    assert sniff(b"step,steps,wall_ms\n1,2,3\n") == "token_csv"
    big = b"answer text line\n" * 10000 + b"generation: 1 tokens, 1.0 s/token (1.0 tok/s)\n"
    assert sniff(big) == "transcript"  # the summary is at the end: the tail is looked at


def test_identity_from_the_ready_line():
    tr = parse_transcript(b'BMOE_READY {"load_s":1.0,"arch":"qwen3moe","n_ctx":512,"model":"m.gguf"}\n')
    assert tr.identity == {"arch": "qwen3moe", "model": "m.gguf"}
    assert parse_transcript(b"just text\n").identity == {}


def _prog(step: int, text: str) -> str:
    return 'BMOE_PROGRESS {"step":%d,"steps":9,"wall_ms":10,"text":"%s"}' % (step, text)


def test_a_progress_line_replaced_by_text_is_a_step_gap_problem():
    lines = [_prog(1, "a"), _prog(2, "ab"), "some plain text where step 3 was", _prog(4, "abcd"),
             _prog(5, "abcde"), _prog(8, "abcdefgh"),  # 6 and 7 gone without a trace
             'BMOE_DONE {"id":1,"tokens":8,"text":"abcdefgh"}',
             _prog(1, "x"), _prog(2, "xy")]  # the next generation starts again at 1: no gap
    tr = parse_transcript(("\n".join(lines) + "\n").encode())
    assert [(p.lineno, p.reason) for p in tr.problems] == [
        (4, "BMOE_PROGRESS step 3 missing: the lines between hold no BMOE_PROGRESS (lost, or replaced by other text)"),
        (6, "BMOE_PROGRESS steps 6-7 (2 tokens) missing: no line between (lost, or replaced by other text)"),
    ]
    assert tr.problems[0].text == "step 2 (line 2) then step 4 (line 4)"
    assert len(tr.generations) == 2 and tr.generations[0]["answer"] == "abcdefgh"  # the good lines still count


def test_a_session_stdout_says_which_request_was_refused_and_the_last_end_is_its_summary():
    from helpers.cli_session import SessionRequest, cli_session, six_requests

    reqs = six_requests()
    run = cli_session([*reqs, SessionRequest(7, "x" * 20, outcome="rejected", n_predict=4096)])
    tr = parse_transcript(run.stdout)
    gens = [(g["id"], g["tokens"], g["done"] is not None, g["error"] is not None) for g in tr.generations]
    assert gens == [(1, 9, True, False), (2, 6, True, False), (3, 11, True, False), (4, 0, False, True),
                    (5, 7, True, False), (6, 5, True, False), (7, 0, False, True)]
    assert tr.generations[3]["error"].msg.startswith("prompt + n_predict exceeds the session n_ctx (4096)")
    # the refused last request has no end: the summary is the last generation that ended (id 6)
    six = next(e for e in run.expected if e["id"] == 6)
    assert tr.summary["tokens"] == 5 and tr.summary["tok_s"] == six["tok_s"]
    assert tr.answer == tr.generations[5]["answer"] == "#6 w2 w3 w4 w5"  # the refused one has no answer
    assert not tr.problems


def test_a_request_refused_before_its_begin_is_a_generation_of_its_own():
    tr = parse_transcript(
        'BMOE_ERROR {"id":0,"fatal":true,"msg":"cannot open"}\n'
        'BMOE_READY {"load_s":1.0,"arch":"qwen3moe","n_ctx":64}\n'
        'BMOE_BEGIN {"id":1}\nBMOE_PROGRESS {"step":1,"steps":1,"delta_text":"a"}\n'
        'BMOE_DONE {"id":1,"tokens":1,"tok_s":5.0}\n'
        'BMOE_ERROR {"id":2,"fatal":false,"msg":"prompt + n_predict exceeds n_ctx"}\n'
        'BMOE_ERROR {"id":null,"fatal":false,"msg":"malformed JSON request"}\n')
    assert [(g["id"], g["tokens"], g["done"] is not None, g["error"] is not None) for g in tr.generations] == [
        (1, 1, True, False), (2, 0, False, True)]


def test_a_request_refused_while_another_generates_leaves_that_generation_whole():
    # bmoe-run's reader thread refuses a malformed request at once, between the tokens of the one
    # in flight: the running generation keeps its id, its tokens and its end
    tr = parse_transcript(
        'BMOE_READY {"load_s":1.0,"arch":"qwen3moe","n_ctx":64}\n'
        'BMOE_BEGIN {"id":1}\nBMOE_PROGRESS {"step":1,"steps":2,"delta_text":"a"}\n'
        'BMOE_ERROR {"id":2,"fatal":false,"msg":"generate: \'prompt\' must be a string"}\n'
        'BMOE_PROGRESS {"step":2,"steps":2,"delta_text":"b"}\n'
        'BMOE_DONE {"id":1,"tokens":2,"tok_s":5.0}\n')
    assert [(g["id"], g["tokens"], g["done"] is not None, g["error"] is not None) for g in tr.generations] == [
        (1, 2, True, False), (2, 0, False, True)]
    assert tr.generations[0]["answer"] == "ab" and not tr.problems
