"""What the gateway answers a bad request: OpenAI's error body with the status, the field and
a code, over real HTTP; the bearer token is required; sessions are not guessable."""

from __future__ import annotations

import httpx
import pytest

from tests.support.gateway import TOKEN

ASK = [{"role": "user", "content": "lookup 3"}]
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def post(url: str, body: object, headers: dict | None = None) -> httpx.Response:
    content = body if isinstance(body, bytes) else None
    return httpx.post(url, json=None if content else body, content=content,
                      headers=AUTH if headers is None else headers, timeout=30)  # fmt: skip


def error_of(response: httpx.Response) -> dict:
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}
    return body["error"]


@pytest.mark.parametrize(
    ("body", "param", "code"),
    [
        ({"model": "policy"}, "messages", None),
        ({"model": "policy", "messages": [{"content": "hi"}]}, "messages[0]", None),
        ({"messages": ASK}, "model", None),
        ({"model": "p", "messages": ASK, "stream": True}, "stream", "unsupported"),
        ({"model": "p", "messages": ASK, "temperature": 0.2}, "temperature", "unsupported_value"),
        ({"model": "p", "messages": ASK, "n": 99}, "n", "invalid_value"),
        ({"model": "p", "messages": ASK, "tool_choice": "required"}, "tool_choice", "unsupported"),
        ({"model": "p", "messages": ASK, "top_logprobs": 3}, "top_logprobs", "unsupported"),
        ({"model": "p", "messages": ASK, "max_tokens": "ten"}, "max_tokens", "invalid_type"),
        ({"model": "p", "messages": [{"role": "assistant", "content": None, "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{bad"}}]}]},
         "messages[0].tool_calls[0].function.arguments", None),
    ],
)  # fmt: skip
def test_a_malformed_chat_request_is_a_400_naming_the_field(gateway, body, param, code):
    opened = gateway.open()
    response = post(f"{opened.url}/chat/completions", body)
    error = error_of(response)
    assert response.status_code == 400 and error["type"] == "invalid_request_error"
    assert error["param"] == param and error["code"] == code and error["message"]
    assert opened.session.bad_requests == 1 and opened.session.errors[0].startswith("request")
    gateway.close_session(opened)


def test_a_body_that_is_not_json_and_a_bad_completions_prompt_are_400s(gateway):
    opened = gateway.open()
    assert error_of(post(f"{opened.url}/chat/completions", b"{nope"))["param"] == "body"
    response = post(f"{opened.url}/completions", {"model": "p", "prompt": ["a", "b"]})
    assert response.status_code == 400 and error_of(response)["param"] == "prompt"
    gateway.close_session(opened)


def test_the_bearer_token_is_required_and_refusals_are_openai_shaped(gateway):
    opened = gateway.open()
    for headers in ({}, {"Authorization": "Bearer wrong"}):
        response = post(f"{opened.url}/chat/completions", {"model": "p", "messages": ASK}, headers)
        assert response.status_code == 401 and error_of(response)["code"] == "invalid_api_key"
    assert opened.session.requests == 0  # refused at the door
    gateway.close_session(opened)


def test_an_unknown_session_or_path_is_a_404(gateway):
    url = gateway.server.url("0" * 32)
    response = post(f"{url}/chat/completions", {"model": "p", "messages": ASK})
    assert response.status_code == 404 and error_of(response)["code"] == "session_not_found"
    response = httpx.get(url.replace("/s/", "/x/") + "/models", headers=AUTH)
    assert response.status_code == 404 and error_of(response)["code"] == "not_found"


def test_the_gateway_listens_on_loopback_only(gateway):
    assert gateway.server.sock.getsockname()[0] == "127.0.0.1"
