"""Kernel keyrings (add_key(2), keyctl(2)), for fscrypt's and eCryptfs's keys."""

from __future__ import annotations

import ctypes
import os

# add_key(2) and keyctl(2) have no wrapper in glibc: called by number (x86-64), so no
# extra tool (keyutils) is needed.


SYS_ADD_KEY = 248


SYS_KEYCTL = 250


KEY_SPEC_SESSION_KEYRING = -3


KEYCTL_JOIN_SESSION_KEYRING = 1


KEYCTL_INVALIDATE = 21


def _key_syscall(number: int, *args: object) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    result = libc.syscall(ctypes.c_long(number), *args)
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return int(result)


def join_new_session_keyring() -> int:
    """Give this process a fresh anonymous session keyring: keys added to it die with
    the process (and its children, which inherit it), whatever ends it."""
    return _key_syscall(SYS_KEYCTL, ctypes.c_int(KEYCTL_JOIN_SESSION_KEYRING), ctypes.c_char_p(None))


def add_key(key_type: str, description: str, payload: bytes | None, keyring: int) -> int:
    """add_key(2): a key (or, with type ``keyring`` and no payload, a keyring) in ``keyring``."""
    return _key_syscall(
        SYS_ADD_KEY,
        ctypes.c_char_p(key_type.encode()),
        ctypes.c_char_p(description.encode()),
        ctypes.c_char_p(payload),
        ctypes.c_size_t(len(payload) if payload else 0),
        ctypes.c_int(keyring),
    )


def invalidate_key(key_id: int) -> None:
    """KEYCTL_INVALIDATE: the key (a keyring: with the keys only it held) is gone at once."""
    _key_syscall(SYS_KEYCTL, ctypes.c_int(KEYCTL_INVALIDATE), ctypes.c_int(key_id))
