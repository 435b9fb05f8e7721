"""Checkpoint and approval signatures: HMAC-SHA256 with a per-user key.

The key comes from ``ACODE_CHECKPOINT_SECRET`` or, when that is unset, from a key
file created once with mode 0600 in the user's config directory. Someone who can
edit the database but not read that key cannot forge a checkpoint or an approval.
A process that an acode session started gets no ``ACODE_CHECKPOINT_SECRET``
(acode.security.child_env): an acode run there uses the key file if there is one, and
never creates one, which would sign with a key of its own.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from pathlib import Path

from acode.errors import CheckpointError, ErrorCode
from acode.security.child_env import KEY_WITHHELD_ENV

__all__ = ["SECRET_ENV", "TAG_BYTES", "Signer", "key_path", "load_signer"]

SECRET_ENV = "ACODE_CHECKPOINT_SECRET"
TAG_BYTES = 16


def key_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "acode" / "checkpoint.key"


_BLOCK = 64  # SHA-256's block size, which HMAC pads its key to


class Signer:
    def __init__(self, key: bytes) -> None:
        # RFC 2104 section 4: the hash states after the key's two padded blocks are the
        # same for every message, so they are computed once and copied. A checkpoint is
        # signed at every step, and hmac.digest spent more on setting up OpenSSL's MAC
        # and hashing the key again than on the message.
        if len(key) > _BLOCK:
            key = hashlib.sha256(key).digest()
        key = key.ljust(_BLOCK, b"\0")
        self._inner = hashlib.sha256(bytes(b ^ 0x36 for b in key))
        self._outer = hashlib.sha256(bytes(b ^ 0x5C for b in key))

    def sign(self, message: bytes) -> str:
        """The whole HMAC-SHA256, in hex (approvals)."""
        return self._mac(message).hex()

    def tag(self, message: bytes) -> bytes:
        """The HMAC-SHA256 truncated to 16 bytes (checkpoints, one at every step). RFC
        2104 allows truncating to half the hash: forging one still takes 2^128 tries."""
        return self._mac(message)[:TAG_BYTES]

    def verify(self, message: bytes, signature: str) -> bool:
        """Whether ``signature`` (hex) is this key's whole HMAC of ``message`` or, for a
        checkpoint, its 16-byte tag; any other length is refused."""
        full = self._mac(message).hex()
        if len(signature) not in (len(full), 2 * TAG_BYTES):
            return False
        return hmac.compare_digest(full[: len(signature)], signature)

    def _mac(self, message: bytes) -> bytes:
        inner = self._inner.copy()
        inner.update(message)
        outer = self._outer.copy()
        outer.update(inner.digest())
        return outer.digest()


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
