"""What stands between `POST /api/login` and guessing passwords.

Failed logins are counted in moving windows (the `limits` library), per client address and per account name:
past either count the login is refused with a 429 and `Retry-After` before any password is checked, the right
one included, until the window has room again. The account's count locks that account for everyone while it is
guessed at from many addresses; the address's count stops one client trying many accounts. Counts live in the
app's process (an app is one process) and are forgotten on restart. A login whose check is still running counts
against the windows as a failure would: logins sent all at once were each admitted before the first was counted
(60 at once from one address had 49 passwords checked where 10 were allowed).

An unknown account name costs a password check too (against a hash of a random password), so that the answer's
time does not tell which accounts exist. Argon2 takes 64 MiB per check: at most HASHING_AT_ONCE run at once, the
other logins wait their turn rather than each taking its own memory.
"""

from __future__ import annotations

import math
import secrets
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property

from limits import RateLimitItem, parse
from limits.storage import MemoryStorage
from limits.strategies import MovingWindowRateLimiter

from forklift.app.security import hash_password, password_matches
from forklift.serve.responses import HttpError

PER_ADDRESS = parse("10/minute")  # failed logins from one client address
PER_ACCOUNT = parse("30/hour")  # failed logins to one account name, from anywhere
HASHING_AT_ONCE = 2  # password checks running at once (64 MiB each)


@dataclass
class LoginAttempt:
    failed: bool = True  # until its password is found to match (a login that raised counts as failed)


class LoginGuard:
    """Counts failed logins and runs the password checks of one app."""

    def __init__(self) -> None:
        self._limiter = MovingWindowRateLimiter(MemoryStorage())
        self._hashing = threading.BoundedSemaphore(HASHING_AT_ONCE)
        self._counting = threading.Lock()
        self._checking: Counter[str] = Counter()  # logins admitted and not yet answered, by window key

    def _windows(self, address: str, name: str) -> tuple[tuple[RateLimitItem, str, str], ...]:
        return (
            (PER_ADDRESS, f"address:{address}", f"from {address}"),
            (PER_ACCOUNT, f"account:{name}", "to this account"),
        )

    @contextmanager
    def attempt(self, address: str, name: str) -> Iterator[LoginAttempt]:
        """A login admitted, or refused (429) where its address or account has used up its failed tries, the
        logins still being checked counted among them; a failure the body marks is counted when it ends."""
        windows = self._windows(address, name)
        with self._counting:
            for item, key, whose in windows:
                if self._limiter.test(item, key, cost=1 + self._checking[key]):
                    continue
                if self._limiter.test(item, key):  # room once those being checked are answered
                    raise HttpError(429, f"too many logins {whose} at once, still being checked: try again in 1 s",
                                    {"Retry-After": "1"})  # fmt: skip
                reset = self._limiter.get_window_stats(item, key).reset_time
                wait = max(1, math.ceil(reset - time.time()))
                raise HttpError(429, f"too many failed logins {whose}: try again in {wait} s",
                                {"Retry-After": str(wait)})  # fmt: skip
            self._checking.update(key for _, key, _ in windows)
        attempt = LoginAttempt()
        try:
            yield attempt
        finally:
            with self._counting:
                self._checking.subtract(key for _, key, _ in windows)
                self._checking += Counter()  # the keys at 0 go
                for item, key, _ in windows if attempt.failed else ():
                    self._limiter.hit(item, key)

    def password_matches(self, password_hash: str | None, password: str) -> bool:
        """Whether `password` is the account's (None: no such account, checked against a stand-in all the same)."""
        with self._hashing:
            matched = password_matches(password_hash or self._stand_in, password)
        return matched and password_hash is not None

    @cached_property
    def _stand_in(self) -> str:
        return hash_password(secrets.token_urlsafe(16))
