"""Where a study lives, so that trials in other processes and on other hosts join it and a later run resumes it.

- no `--storage`: a journal file in OUT (`OUT/study.journal`), safe for the processes of one host (file lock);
- `postgresql://...` (or `mysql://...`): Optuna's RDB storage, shared by hosts, with a heartbeat: a trial whose
  process stopped beating for GRACE_S seconds is marked failed when another trial starts;
- `sqlite:///...`: for one process only; SQLite locks the whole file, so parallel trials are refused.

A trial records its host and process id; a trial left running by a process of this host that no longer exists
(killed, machine rebooted) is marked failed when the search starts or resumes, whatever the storage.
"""

from __future__ import annotations

import os
import socket
import time
import warnings
from pathlib import Path

import optuna
from optuna.storages import BaseStorage, JournalStorage, RDBStorage
from optuna.storages.journal import JournalFileBackend
from optuna.trial import TrialState

from forklift.errors import ForkliftError

JOURNAL = "study.journal"
HEARTBEAT_S = 10
GRACE_S = 30
SHARED_SCHEMES = ("postgresql", "mysql")
SCHEMA_ATTEMPTS = 5


def storage_url(spec: str | None, out: Path) -> str:
    """What `--storage` names, as given, or the journal file in OUT: what optuna-dashboard is pointed at."""
    return spec or str(Path(out) / JOURNAL)


def open_storage(spec: str | None, out: Path, *, parallel: int) -> BaseStorage:
    """The storage `--storage spec` names (None: the journal file in OUT), or one line saying why not."""
    scheme = (spec or "").split(":", 1)[0].split("+", 1)[0]
    if spec is None:
        Path(out).mkdir(parents=True, exist_ok=True)
        return JournalStorage(JournalFileBackend(storage_url(spec, out)))
    if scheme == "sqlite":
        if parallel > 1:
            raise ForkliftError(
                f"--storage {spec}: SQLite locks the whole file, so {parallel} parallel trials would fail with "
                "'database is locked'; leave --storage out (a journal file in OUT) or use postgresql://"
            )
        return _rdb(spec)
    if scheme in SHARED_SCHEMES:
        return _rdb(spec, heartbeat=True)
    raise ForkliftError(f"--storage {spec}: not a storage URL; use postgresql://USER@HOST:PORT/DB or sqlite:///FILE")


def _rdb(url: str, *, heartbeat: bool = False) -> RDBStorage:
    """Optuna's RDB storage at `url`. Hosts started together race to create its tables in a fresh database; the
    loser's insert fails on a unique key or an existing table, and it tries again once the tables are there."""
    import sqlalchemy.exc

    interval, grace = (HEARTBEAT_S, GRACE_S) if heartbeat else (None, None)
    for attempt in range(1, SCHEMA_ATTEMPTS + 1):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)  # the heartbeat options
                return RDBStorage(url, heartbeat_interval=interval, grace_period=grace)
        except (sqlalchemy.exc.IntegrityError, sqlalchemy.exc.ProgrammingError) as exc:
            if attempt == SCHEMA_ATTEMPTS:
                raise ForkliftError(f"--storage {url}: cannot create its tables: {str(exc).splitlines()[0]}") from exc
            time.sleep(0.5 * attempt)
        except Exception as exc:  # SQLAlchemy's connection, driver and URL errors
            raise ForkliftError(f"--storage {url}: cannot open it: {str(exc).splitlines()[0]}") from exc
    raise AssertionError("unreachable")


def mark_owner(trial: optuna.Trial) -> None:
    """Record which host and process runs the trial (see `fail_dead_trials`)."""
    trial.set_user_attr("host", socket.gethostname())
    trial.set_user_attr("pid", os.getpid())


def fail_dead_trials(storage: BaseStorage, study_name: str) -> list[int]:
    """Mark failed the running trials of this host whose process is gone; their numbers."""
    host, failed = socket.gethostname(), []
    study_id = storage.get_study_id_from_name(study_name)
    for trial in storage.get_all_trials(study_id, deepcopy=False, states=(TrialState.RUNNING,)):
        pid = trial.user_attrs.get("pid")
        if trial.user_attrs.get("host") != host or not isinstance(pid, int) or _alive(pid):
            continue
        trial_id = storage.get_trial_id_from_study_id_trial_number(study_id, trial.number)
        try:
            storage.set_trial_state_values(trial_id, state=TrialState.FAIL)
        except optuna.exceptions.UpdateFinishedTrialError:
            continue  # another process got there first
        failed.append(trial.number)
    return failed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, another user's
        return True
    return True
