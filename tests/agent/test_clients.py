"""The openai client against a real local chat-completions server: retries, streaming, errors, transcript."""

import json
import socket
import time

import pytest

from autotune import ledger as ledger_mod
from autotune.agent import clients
from autotune.config import compose
from autotune.errors import UserError

MESSAGES = [{"role": "system", "content": "S" * 200}, {"role": "user", "content": "T" * 200}]
SLOT = clients.Slot("rms_norm", 0, 1)


def _client(tmp_path, url, *extra):
    cfg = compose(["agent=openai", f"agent.base_url={url}", "agent.model=test-model", *extra])
    return clients.make(cfg, tmp_path, "rms_norm")


def test_429_with_retry_after_is_retried_after_the_wait(tmp_path, llm, reply_cls):
    answers = iter([reply_cls(status=429, headers={"retry-after": "1"}), reply_cls("hello")])
    llm.responder = lambda body: next(answers)
    ex = _client(tmp_path, llm.base_url).complete(MESSAGES, SLOT)
    first, second = llm.chat_requests()
    assert ex.text == "hello" and ex.source == "live"
    assert second.at - first.at >= 0.95  # the server's Retry-After, not the client's 0.5 s first backoff
    assert second.headers.get("x-stainless-retry-count") == "1"


def test_a_retry_after_beyond_the_cap_is_reported_not_slept(tmp_path, llm, reply_cls):
    llm.responder = lambda body: reply_cls(status=429, headers={"retry-after": "600"})
    start = time.monotonic()
    with pytest.raises(UserError, match="answered 429.*asked to wait 600 s"):
        _client(tmp_path, llm.base_url).complete(MESSAGES, SLOT)
    assert time.monotonic() - start < 10 and len(llm.chat_requests()) == 1


def test_streaming_collects_the_text_and_the_usage_of_the_last_chunk(tmp_path, llm, reply_cls):
    llm.responder = lambda body: reply_cls("x" * 300)
    client = _client(tmp_path, llm.base_url, "agent.stream=true", "agent.price.input_per_mtok=1000000")
    client.complete(MESSAGES[:1], SLOT)
    ex = client.complete(MESSAGES, clients.Slot("rms_norm", 0, 2))
    assert llm.chat_requests()[-1].body["stream"] is True
    assert ex.text == "x" * 300 and ex.usage.completion_tokens == 75
    assert ex.usage.cached_known and ex.usage.cached_tokens == 48  # the system message's 3 whole 16-token blocks
    assert ex.cost_usd == pytest.approx(ex.usage.prompt_tokens - 48)  # $1 per uncached prompt token here


def test_every_exchange_is_in_the_transcript_and_a_repeat_is_answered_from_it(tmp_path, llm, reply_cls):
    llm.responder = lambda body: reply_cls("answer")
    client = _client(tmp_path, llm.base_url)
    ex = client.complete(MESSAGES, SLOT)
    again = _client(tmp_path, llm.base_url).complete(MESSAGES, SLOT)  # a resumed run: a new client, same run dir
    assert len(llm.chat_requests()) == 1 and again.source == "transcript" and again.text == "answer"
    (rec,) = ledger_mod.read(tmp_path / "transcript.jsonl")
    assert rec["messages"] == MESSAGES and rec["response"] == "answer" and rec["request_sha256"] == ex.request_sha256
    assert rec["usage"]["prompt_tokens"] == ex.usage.prompt_tokens and rec["params"]["temperature"] == 0.2


def test_a_dead_endpoint_names_the_url_and_the_refusal(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1"
    with pytest.raises(UserError, match=rf"cannot reach the LLM endpoint {url}: .*(refused|ConnectError)"):
        _client(tmp_path, url, "agent.max_retries=0").complete(MESSAGES, SLOT)


def test_a_wrong_path_shows_the_404_body(tmp_path, llm):
    wrong = llm.base_url.removesuffix("/v1")
    with pytest.raises(UserError, match=r"answered 404: .*no route /chat/completions.*ending in /v1"):
        _client(tmp_path, wrong, "agent.max_retries=0").complete(MESSAGES, SLOT)


def test_a_rejected_key_names_the_variable_to_set(tmp_path, fake_llm_cls, monkeypatch):
    server = fake_llm_cls(api_key="sk-right-key-123456").start()
    try:
        monkeypatch.setenv("AUTOTUNE_TEST_KEY", "sk-wrong-key-654321")
        with pytest.raises(UserError, match="answered 401.*AUTOTUNE_TEST_KEY"):
            _client(tmp_path, server.base_url, "agent.api_key_env=AUTOTUNE_TEST_KEY").complete(MESSAGES, SLOT)
    finally:
        server.stop()


def test_missing_endpoint_settings_say_which_override_to_pass(tmp_path):
    with pytest.raises(UserError, match=r"agent.base_url is not set \(pass agent.base_url="):
        clients.make(compose(["agent=openai", "agent.model=m"]), tmp_path, "rms_norm")
    with pytest.raises(UserError, match=r"agent.model is not set"):
        clients.make(compose(["agent=openai", "agent.base_url=http://127.0.0.1:1/v1"]), tmp_path, "rms_norm")
    with pytest.raises(UserError, match=r"agent.transcript is not set"):
        clients.make(compose(["agent=replay"]), tmp_path, "rms_norm")


def test_replay_answers_recorded_requests_and_names_a_miss(tmp_path, llm, reply_cls):
    llm.responder = lambda body: reply_cls("recorded answer")
    _client(tmp_path / "rec", llm.base_url).complete(MESSAGES, SLOT)
    cfg = compose(["agent=replay", f"agent.transcript={tmp_path / 'rec' / 'transcript.jsonl'}"])
    replay = clients.make(cfg, tmp_path / "new", "rms_norm")
    assert replay.complete(MESSAGES, SLOT).text == "recorded answer"
    changed = [MESSAGES[0], {"role": "user", "content": "different task"}]
    with pytest.raises(UserError,
                       match="no recorded answer for rms_norm candidate 0 turn 1: the task differs at message 2"):
        replay.complete(changed, SLOT)
    assert len(llm.chat_requests()) == 1
    assert json.loads((tmp_path / "new" / "transcript.jsonl").read_text())["source"] == "replay"


def test_replay_matches_feedback_by_the_verdict_status_and_replies_byte_for_byte(tmp_path, llm, reply_cls):
    llm.responder = lambda body: reply_cls(f"answer {len(body['messages'])}")
    turn2 = [*MESSAGES, {"role": "assistant", "content": "answer 2"},
             {"role": "user", "content": "**incorrect**: case seed 1234 (salted)"}]
    recorder = _client(tmp_path / "rec", llm.base_url)
    recorder.complete(MESSAGES, SLOT)
    recorder.complete(turn2, clients.Slot("rms_norm", 0, 2, ("incorrect",)))
    cfg = compose(["agent=replay", f"agent.transcript={tmp_path / 'rec' / 'transcript.jsonl'}"])
    replay = clients.make(cfg, tmp_path / "new", "rms_norm")

    resalted = [*turn2[:3], {"role": "user", "content": "**incorrect**: case seed 9876 (salted)"}]
    ex = replay.complete(resalted, clients.Slot("rms_norm", 0, 2, ("incorrect",)))
    assert ex.text == "answer 4" and ex.request_sha256 == clients.request_sha256(resalted)
    with pytest.raises(UserError, match="turn 2: the checker judged turn 1's file slower, the recorded run's "
                                        "checker incorrect, at message 4"):
        replay.complete(resalted, clients.Slot("rms_norm", 0, 2, ("slower",)))
    other_reply = [*MESSAGES, {"role": "assistant", "content": "another answer"}, resalted[3]]
    with pytest.raises(UserError, match="the model's reply at turn 1 differs at message 3"):
        replay.complete(other_reply, clients.Slot("rms_norm", 0, 2, ("incorrect",)))
    # Without outcomes (a caller that gives none) feedback counts byte for byte.
    with pytest.raises(UserError, match="turn 2: the feedback on turn 1 differs at message 4 and the request "
                                        "gives no checker status"):
        replay.complete(resalted, clients.Slot("rms_norm", 0, 2))
    assert len(llm.chat_requests()) == 2
    keys = [r["replay_key"] for r in ledger_mod.read(tmp_path / "new" / "transcript.jsonl")]
    assert keys == [clients.replay_key(turn2, clients.Slot("rms_norm", 0, 2, ("incorrect",)))]  # = the recorded key
