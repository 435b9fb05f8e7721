"""The user's key: checkpoint and approval signatures (HMAC-SHA256) and the keys of
sessions' hash chains (acode.domain.chain).

The key comes from ``ACODE_CHECKPOINT_SECRET`` or, when that is unset, from a key
file created once with mode 0600 in the user's config directory. Someone who can
edit the database but not read that key can neither edit nor forge an event, a
checkpoint or an approval. A process that an acode session started gets no
``ACODE_CHECKPOINT_SECRET`` (acode.security.child_env): an acode run there uses the key
file if there is one, and never creates one, which would sign with a key of its own.
"""

from __future__ import annotations

import hmac
import os
from pathlib import Path

from acode.domain.chain import CHAIN_VERSION, ChainKey, Mac
from acode.errors import CheckpointError, ErrorCode
from acode.security.child_env import KEY_WITHHELD_ENV

__all__ = ["SECRET_ENV", "TAG_BYTES", "Signer", "key_path", "load_signer"]

SECRET_ENV = "ACODE_CHECKPOINT_SECRET"
TAG_BYTES = 16


def key_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "acode" / "checkpoint.key"


# A key's id: the first bytes of its HMAC of this text. Stored with each session, it
# tells a key that changed from a history that was edited; it reveals nothing of the key.
_KEY_ID_MESSAGE = b"acode-key-id"


class Signer:
    """The user's key: checkpoint and approval signatures, the keys of sessions' chains."""

    def __init__(self, key: bytes) -> None:
        self._key = Mac(key)
        self.key_id = self._key.digest(_KEY_ID_MESSAGE)[:4].hex()

    def sign(self, message: bytes) -> str:
        """The whole HMAC-SHA256, in hex (approvals)."""
        return self._key.digest(message).hex()

    def tag(self, message: bytes) -> bytes:
        """The HMAC-SHA256 truncated to 16 bytes (checkpoints, one at every step). RFC
        2104 allows truncating to half the hash: forging one still takes 2^128 tries."""
        return self._key.digest(message)[:TAG_BYTES]

    def verify(self, message: bytes, signature: str) -> bool:
        """Whether ``signature`` (hex) is this key's whole HMAC of ``message`` or, for a
        checkpoint, its 16-byte tag; any other length is refused."""
        full = self._key.digest(message).hex()
        if len(signature) not in (len(full), 2 * TAG_BYTES):
            return False
        return hmac.compare_digest(full[: len(signature)], signature)

    def chain_key(self, session_id: str) -> ChainKey:
        """The key of session ``session_id``'s chain, derived from this one: a link made
        for one session is worth nothing in another."""
        derived = self._key.digest(f"acode-chain:v{CHAIN_VERSION}\n{session_id}".encode())
        return ChainKey(Mac(derived), session_id)


def load_signer() -> Signer:
    secret = os.environ.get(SECRET_ENV)
    if secret:
        return Signer(secret.encode())
    return Signer(_key_file(key_path()))


def _key_file(path: Path) -> bytes:
    try:
        return _read_key(path)
    except FileNotFoundError:
        if os.environ.get(KEY_WITHHELD_ENV):
            raise CheckpointError(
                f"no checkpoint key here: the acode session that started this process keeps "
                f"its key ({SECRET_ENV}) from the commands it runs, and there is no key "
                f"file {path}",
                hint="run this acode command from your own shell, not from a step or an "
                "engine of a session",
                code=ErrorCode.KEY_WITHHELD,
            ) from None
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    key = os.urandom(32)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        return _read_key(path)  # another process created it first
    with os.fdopen(fd, "wb") as f:
        f.write(key)
        f.flush()
        os.fsync(f.fileno())
    return key


def _read_key(path: Path) -> bytes:
    st = path.lstat()
    if st.st_mode & 0o077:
        raise CheckpointError(
            f"the checkpoint key {path} is readable by others (mode {st.st_mode & 0o777:o})",
            hint=f"run `chmod 600 {path}`, or set {SECRET_ENV}",
            code=ErrorCode.CHECKPOINT_INVALID,
        )
    key = path.read_bytes()
    if len(key) < 16:
        raise CheckpointError(
            f"the checkpoint key {path} is too short ({len(key)} bytes)",
            hint=f"set {SECRET_ENV}, or restore the key file; "
            "a new key cannot verify old checkpoints",
        )
    return key
