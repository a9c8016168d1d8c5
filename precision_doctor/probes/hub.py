"""`--hub`: a model's config.json and safetensors index fetched from the Hugging Face Hub, only when the user opts
in and only for a model id found nowhere on this machine nor in the doctor's table. Nothing else is fetched, and
nothing without `--hub`: the doctor works offline by default.

Requests go to `$HF_ENDPOINT` (default https://huggingface.co) as `<id>/resolve/main/<file>`, with `$HF_TOKEN`
for gated models, which is sent to that host only (a redirect to another host carries no token). What comes back
is bounded, read as JSON and kept in the doctor's state folder (`<state>/precision-doctor/hub/`), so the next run
reads it offline. `HF_HUB_OFFLINE=1` is obeyed: nothing is fetched.
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping

from ..model.errors import InputError
from ..model.util import record
from ..system.reads import not_cacheable
from ..system.safe_io import OwnFolder
from ..system.sources import parse_json
from ..system.state import APP, checked_state_home

DEFAULT_ENDPOINT = "https://huggingface.co"
FILES = ("config.json", "model.safetensors.index.json")
MAX_BYTES = 4 * 1024 * 1024  # a config is a few KiB; the largest indexes are a few hundred
TIMEOUT_S = 20
_ID = re.compile(r"[A-Za-z0-9][\w.-]{0,95}(/[A-Za-z0-9][\w.-]{0,95})?")


@record
class Fetched:
    config: dict | None  # None: not fetched, and why
    index: dict | None = None
    url: str = ""
    reason: str = ""


def fetch_model_files(model_id: str, environ: Mapping[str, str]) -> Fetched:
    """The model's config.json and safetensors index: from the state folder when fetched before, else the Hub."""
    if not _ID.fullmatch(model_id) or ".." in model_id:
        return Fetched(None, reason=f"{model_id!r} is not a Hub model id")
    endpoint = environ.get("HF_ENDPOINT", DEFAULT_ENDPOINT).rstrip("/")
    url = f"{endpoint}/{model_id}/resolve/main/config.json"
    try:
        cached = _cached(model_id)
    except InputError:  # the state folder cannot be used: fetch, keep nothing
        cached = {}
    if cached.get("config.json") is not None:
        return Fetched(cached["config.json"], cached.get("model.safetensors.index.json"), url)
    if environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on"):
        return Fetched(None, url=url, reason="--hub: HF_HUB_OFFLINE is set, so nothing is fetched")
    not_cacheable("a config fetched from the Hub")  # what the network says is not fingerprinted
    token = environ.get("HF_TOKEN") or environ.get("HUGGING_FACE_HUB_TOKEN") or ""
    got: dict[str, dict | None] = {}
    for name in FILES:
        try:
            got[name] = _get(f"{endpoint}/{model_id}/resolve/main/{name}", token)
        except _Missing:
            got[name] = None
            if name == "config.json":
                return Fetched(None, url=url, reason=f"--hub: no config.json for {model_id} on {endpoint}")
        except _Refused as exc:
            return Fetched(None, url=url, reason=f"--hub: {exc}")
    try:
        _keep(model_id, got)
    except InputError:
        pass  # not kept: the next run fetches again
    return Fetched(got["config.json"], got.get("model.safetensors.index.json"), url)


class _Missing(Exception):
    pass


class _Refused(Exception):
    pass


class _SameHostAuth(urllib.request.HTTPRedirectHandler):
    """Follow redirects (the Hub sends large files to a CDN), dropping the token when the host changes."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None and urllib.parse.urlsplit(newurl).netloc != urllib.parse.urlsplit(req.full_url).netloc:
            new.remove_header("Authorization")
        return new


def _get(url: str, token: str) -> dict:
    if urllib.parse.urlsplit(url).scheme not in ("https", "http"):
        raise _Refused(f"{url}: only http(s) endpoints are fetched")
    request = urllib.request.Request(url, headers={"User-Agent": f"{APP} (--hub)"})
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    opener = urllib.request.build_opener(_SameHostAuth())
    try:
        with opener.open(request, timeout=TIMEOUT_S) as response:
            data = response.read(MAX_BYTES + 1)
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            raise _Missing() from None
        if exc.code in (401, 403):
            hint = "set HF_TOKEN to a token with access" if not token else "the token has no access to it"
            raise _Refused(f"{_shown(url)}: HTTP {exc.code}, a gated or private model ({hint})") from None
        raise _Refused(f"{_shown(url)}: HTTP {exc.code}") from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise _Refused(f"{_shown(url)}: cannot be reached ({reason})") from None
    if len(data) > MAX_BYTES:
        raise _Refused(f"{_shown(url)}: larger than {MAX_BYTES // (1024 * 1024)} MiB, not a model config")
    try:
        value = parse_json(data)
    except ValueError:
        raise _Refused(f"{_shown(url)}: not JSON") from None
    if not isinstance(value, dict):
        raise _Refused(f"{_shown(url)}: not a JSON object")
    return value


def _shown(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    return f"{parts.scheme}://{parts.hostname or ''}{parts.path}"  # never a userinfo or a query


def _folder_name(model_id: str) -> str:
    return "models--" + model_id.replace("/", "--")


def _cached(model_id: str) -> dict[str, dict | None]:
    out: dict[str, dict | None] = {}
    folder = OwnFolder.open(checked_state_home(), (APP, "hub", _folder_name(model_id)), create=False)
    if folder is None:
        return out
    try:
        for name in FILES:
            if name in folder.names():
                try:
                    value = parse_json(folder.read(name))
                except ValueError:
                    continue
                out[name] = value if isinstance(value, dict) else None
    finally:
        folder.close()
    return out


def _keep(model_id: str, files: Mapping[str, dict | None]) -> None:
    folder = OwnFolder.open(checked_state_home(), (APP, "hub", _folder_name(model_id)), create=True)
    if folder is None:
        return
    try:
        for name, value in files.items():
            if value is not None:
                folder.write(name, json.dumps(value).encode("utf-8"))
    finally:
        folder.close()
