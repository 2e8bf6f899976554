"""The provider's scrubber: every form its credentials take on the wire, found and masked.

Unit tests of `Scrubber`, then `OpenAIChatProvider` against a server on 127.0.0.1 that echoes
what it was sent (the `Authorization` header, the path with its query) in error answers,
malformed replies, a 200 reply's content and model, and the HTTP client's own log lines.
"""

import base64
import json
import logging
from urllib.parse import quote, quote_plus

import pytest
from chat_server import ChatServer, Received, Reply, completion
from structlog.testing import capture_logs
from test_llm_repair import analyst

from converge import ContextKey, Engine
from converge_suggestors import ChatMessage, ChatRequest, OpenAIChatProvider, ProviderError
from converge_suggestors._secrets import Scrubber
from tests.doubles import seed

KEY = "sk-test-SECRET-0123456789abcdef"
USER, PASSWORD = "alice", "p@ss/w:rd é 42"
TOKEN = "q-token-7f3a9b2c1d"
REQUEST = ChatRequest(model="", messages=(ChatMessage(role="user", content="hi"),))
QUESTION = seed("q", "a question", provenance="input:test")


def basic(user: str, password: str) -> str:
    return base64.b64encode(f"{user}:{password}".encode()).decode()


def url_of(server: ChatServer) -> str:
    """The server's base URL with credentials and a key in its query string."""
    host = server.base_url.removeprefix("http://")
    userinfo = f"{quote(USER, safe='')}:{quote(PASSWORD, safe='')}"
    return f"http://{userinfo}@{host}?api-version=2024-06-01&key={quote(TOKEN)}"


def secrets_forms() -> list[str]:
    """Every form the test secrets may take in an echo: what must never come out."""
    forms: list[str] = []
    for secret in (KEY, PASSWORD, TOKEN, f"{USER}:{PASSWORD}"):
        data = secret.encode()
        forms += [secret, quote(secret, safe=""), quote_plus(secret), json.dumps(secret)[1:-1]]
        forms += [base64.b64encode(data).decode(), base64.urlsafe_b64encode(data).decode()]
    forms.append(basic(USER, PASSWORD))
    return forms


def assert_clean(text: str) -> None:
    for form in secrets_forms():
        assert form not in text, f"{form!r} in {text!r}"
    for secret in (KEY, TOKEN, basic(USER, PASSWORD)):
        assert secret[:8] not in text, f"the start of {secret!r} in {text!r}"


def echo(received: Received) -> str:
    """What a careless server says back: the request's credentials, in their forms."""
    auth = received.headers.get("Authorization", "")
    return json.dumps({"error": "denied", "authorization": auth, "path": received.path, "key": KEY})


# --- the scrubber ------------------------------------------------------------------------------


def test_the_scrubber_masks_the_key_in_every_form() -> None:
    scrubber = Scrubber.of("http://127.0.0.1:1/v1", KEY)
    data = KEY.encode()
    wrapped = [b"x" * offset + b"Bearer " + data + b"!" for offset in range(3)]
    for text in [
        KEY,
        f"Authorization: Bearer {KEY}",
        quote(KEY, safe=""),
        json.dumps({"k": KEY}),
        *(base64.b64encode(blob).decode() for blob in wrapped),  # any alignment
        *(base64.urlsafe_b64encode(blob).decode() for blob in wrapped),
        repr(data),
    ]:
        clean = scrubber.scrub(f"<{text}>")
        assert KEY not in clean, text
        assert "***" in clean, text
        assert scrubber.find(text) == "the API key"
    assert scrubber.scrub("nothing secret here") == "nothing secret here"
    assert scrubber.find("nothing secret here") is None


def test_the_scrubber_masks_url_credentials_in_every_form_the_basic_header_takes() -> None:
    scrubber = Scrubber.of("http://" + "alice:" + quote(PASSWORD, safe="") + "@h:1/v1", None)
    for text in [
        f"Authorization: Basic {basic(USER, PASSWORD)}",
        basic(USER, PASSWORD).rstrip("="),
        f"{USER}:{PASSWORD}",
        PASSWORD,
        quote(PASSWORD, safe=""),
        quote_plus(PASSWORD),
        json.dumps(PASSWORD),
        json.dumps(PASSWORD, ensure_ascii=False),
        "http://alice:" + quote(PASSWORD, safe="") + "@h:1/v1",
    ]:
        assert scrubber.find(text) == "the URL's credentials", text
        assert_clean(scrubber.scrub(text))


def test_the_scrubber_masks_query_values_but_not_api_version() -> None:
    scrubber = Scrubber.of(f"https://h/v1?api-version=2024-06-01&key={quote(TOKEN)}", None)
    echoed = f"no route for /v1/chat/completions?api-version=2024-06-01&key={quote(TOKEN)}"
    assert scrubber.scrub(echoed) == (
        "no route for /v1/chat/completions?api-version=2024-06-01&***"
    )
    assert scrubber.scrub(f"the token was {TOKEN}") == "the token was ***"
    assert scrubber.find(TOKEN) == "the URL's query parameter 'key'"
    assert scrubber.find("2024-06-01") is None


def test_a_short_value_is_masked_only_in_its_forms_with_context() -> None:
    scrubber = Scrubber.of("http://bob:pw@h/v1?x=1", "EMPTY")
    assert scrubber.scrub("The list is EMPTY, pw and x") == "The list is EMPTY, pw and x"
    assert scrubber.scrub("Authorization: Bearer EMPTY") == "Authorization: ***"
    assert scrubber.scrub(f"Basic {basic('bob', 'pw')}; bob:pw; ?x=1") == "Basic ***; ***; ?***"


def test_a_form_escaped_again_inside_json_is_masked() -> None:
    token = 'tok/"en\\é-7f3a9b2c'
    scrubber = Scrubber.of(f"http://h/v1?key={quote(token, safe='')}", None)
    text = token
    for _ in range(4):  # as it is, then inside a JSON string, inside another, inside another
        assert scrubber.find(f"<{text}>") == "the URL's query parameter 'key'", text
        assert "7f3a9b2c" not in scrubber.scrub(f"<{text}>")
        text = json.dumps(text)[1:-1]


def test_a_secret_with_few_letters_and_digits_is_still_found_anywhere() -> None:
    password = "@@!é/é:%+&"  # no run of letters or digits to look for first
    scrubber = Scrubber.of(f"http://u:{quote(password, safe='')}@h/v1", None)
    long_text = "x" * 100_000 + password + "y" * 100_000
    assert scrubber.find(long_text) == "the URL's credentials"
    assert scrubber.scrub(long_text) == "x" * 100_000 + "***" + "y" * 100_000
    assert scrubber.scrub(quote_plus(password)) == "***"


def test_every_occurrence_is_masked_however_close() -> None:
    scrubber = Scrubber.of("http://h/v1", KEY)
    text = f"{KEY}{KEY} {KEY}" + "z" * 5000 + KEY
    assert scrubber.scrub(text) == "****** ***" + "z" * 5000 + "***"


def test_an_excerpt_is_scrubbed_whole_before_it_is_cut() -> None:
    scrubber = Scrubber.of("http://h/v1", KEY)
    text = "a" * 290 + KEY + "b" * 100  # the key across the 300-character boundary
    excerpt = scrubber.excerpt(text, 300)
    assert excerpt == "a" * 290 + "***" + "b" * 6 + "…"
    cut_short = "a" * 20 + KEY[:12]  # a body read up to a cap, ending inside the key
    assert scrubber.excerpt(cut_short, 300, truncated=True) == "a" * 20


# --- the provider ------------------------------------------------------------------------------


async def fail(subject: OpenAIChatProvider) -> ProviderError:
    with pytest.raises(ProviderError) as caught:
        await subject.complete(REQUEST)
    return caught.value


@pytest.mark.parametrize("status", [401, 404, 503])
async def test_an_error_answer_echoing_every_credential_is_scrubbed(
    chat_server: ChatServer, status: int
) -> None:
    def deny(received: Received) -> Reply:
        return Reply(status, echo(received))

    chat_server.responder = deny
    async with OpenAIChatProvider(url_of(chat_server), KEY, model="m", backoff=0.001) as subject:
        with capture_logs() as logs:
            error = await fail(subject)
        assert_clean(repr(subject))
    [first, *_] = chat_server.received
    assert first.headers["Authorization"] in (f"Bearer {KEY}", f"Basic {basic(USER, PASSWORD)}")
    assert first.path.endswith(f"?api-version=2024-06-01&key={quote(TOKEN)}")
    message = str(error)
    assert f"returned {status}" in message
    assert "***" in message
    assert "api-version=2024-06-01" in message  # what is no secret stays
    assert_clean(message)
    assert_clean(repr(logs))


async def test_a_key_echoed_across_the_excerpt_boundary_leaves_none_of_it(
    chat_server: ChatServer,
) -> None:
    for start in range(280, 301, 4):
        chat_server.replies.append(Reply(400, "e" * start + KEY + "!" * 400))
    async with OpenAIChatProvider(chat_server.base_url, KEY, model="m") as subject:
        for _ in range(280, 301, 4):
            assert_clean(str(await fail(subject)))


async def test_a_malformed_reply_echoing_the_key_is_scrubbed(chat_server: ChatServer) -> None:
    chat_server.replies += [
        Reply(200, f"<html>{'x' * 280}{KEY}</html>"),
        Reply(200, json.dumps({"choices": KEY})),
    ]
    async with OpenAIChatProvider(chat_server.base_url, KEY, model="m") as subject:
        for _ in range(2):
            message = str(await fail(subject))
            assert "returned a malformed reply" in message
            assert_clean(message)


@pytest.mark.parametrize(
    ("where", "reply"),
    [
        ("choices[0].message.content", completion(f"the key is {KEY}", prompt=5)),
        ("choices[0].message.content", completion(f"auth: {basic(USER, PASSWORD)}", prompt=5)),
        ("choices[0].message.content", completion(f"see ?key={quote(TOKEN)}", prompt=5)),
        ("model", completion("fine", model=f"gpt-{KEY}", prompt=5)),
        ("choices[0].finish_reason", completion("fine", finish_reason=PASSWORD, prompt=5)),
    ],
)
async def test_a_200_reply_holding_a_credential_is_refused(
    chat_server: ChatServer, where: str, reply: Reply
) -> None:
    chat_server.replies.append(reply)
    async with OpenAIChatProvider(url_of(chat_server), KEY, model="m") as subject:
        error = await fail(subject)
    message = str(error)
    assert f"returned a reply whose {where} holds the " in message
    assert message.endswith("refused, so that no credential reaches a proposal or the trace")
    assert (error.status, error.tokens) == (200, 12)  # it cost what its usage says
    assert len(chat_server.received) == 1
    assert_clean(message)


async def test_a_200_reply_echoing_the_key_reaches_no_proposal_and_no_trace(
    chat_server: ChatServer,
) -> None:
    content = json.dumps({"proposals": [{"id": "k", "content": f"key {KEY}", "confidence": 1}]})
    chat_server.replies.append(completion(content, prompt=20, completion_tokens=30))
    async with OpenAIChatProvider(url_of(chat_server), KEY, model="m") as model:
        engine = Engine(record_effects=True)
        engine.register_suggestor(analyst(model))
        result = await engine.run(inputs=[QUESTION])
    [execution] = result.trace.cycles[0].executions
    assert (execution.outcome, execution.tokens) == ("failed", 50)
    assert execution.error is not None
    assert "choices[0].message.content holds the API key: refused" in execution.error
    assert not result.context.get(ContextKey.PROPOSALS)
    assert_clean(result.trace.model_dump_json())


async def test_the_http_clients_own_log_lines_are_scrubbed(
    chat_server: ChatServer, caplog: pytest.LogCaptureFixture
) -> None:
    def answer(received: Received) -> Reply:
        auth = received.headers.get("Authorization", "")
        return Reply(headers={"X-Echo": auth, "X-Path": received.path}, body=completion("ok").body)

    chat_server.responder = answer
    with caplog.at_level(logging.DEBUG):
        async with OpenAIChatProvider(url_of(chat_server), KEY, model="m") as subject:
            assert (await subject.complete(REQUEST)).content == "ok"
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert "HTTP Request: POST" in logged
    assert "X-Echo" in logged
    assert_clean(logged)


def test_the_endpoint_and_repr_hold_no_credential() -> None:
    subject = OpenAIChatProvider(f"https://{USER}:x@h/{KEY}/v1?key={TOKEN}", KEY, model="m")
    assert subject.endpoint == "https://h/***/v1/chat/completions"
    assert_clean(repr(subject))


def test_a_scrubber_is_shown_as_a_count_only() -> None:
    scrubber = Scrubber.of("http://h/v1", KEY)
    assert KEY not in repr(scrubber)
    assert repr(scrubber).startswith("Scrubber(")
    assert scrubber.find(f"x{KEY}x") == "the API key"
