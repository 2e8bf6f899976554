"""The review console: `converge ui` serves a store's runs, live, and decides human gates.

Install the `ui` extra (`pip install 'converge-engine[ui]'`: Starlette and uvicorn). The console
lists the runs, shows each run's report and follows a running run cycle by cycle, and shows
each pending gate's proposal as the signed checkpoint will apply it, with approve and reject.
It shows a run's parent and forks, forks a run from a cycle of its timeline (the changes typed
in a form, checked as `converge fork` checks them), and compares two runs as `converge diff`.
Every request needs a session (a browser signs in with its reviewer's token or a one-time
link, and gets a cookie holding a random session id) or a reviewer's token, and every form a
CSRF token; the reviewer who signed in is the one recorded as having decided. Every page
that shows a record says what checking its signature found. See the "Review console" page
of the docs.

- `ConsoleSettings`, `create_app`: the console as an ASGI application.
- `Reviewer`, `Reviewers`: who may review, by token (kept as SHA-256 digests).
- `Sessions`: the signed-in browsers and one-time sign-in links, in memory.
- `serve`: run it with uvicorn.
"""

from .._core._public import publish as _publish
from ._app import create_app
from ._auth import Reviewer, Reviewers, new_token, token_digest
from ._serve import serve
from ._sessions import Sessions
from ._settings import ConsoleSettings

__all__ = [
    "ConsoleSettings",
    "Reviewer",
    "Reviewers",
    "Sessions",
    "create_app",
    "new_token",
    "serve",
    "token_digest",
]

_publish(__name__, globals(), __all__)
