"""The hash-chained audit log of KV operations: verification, tampering, the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from app.platform.audit import GENESIS, AuditError, AuditLog, verify

ROOT = Path(__file__).resolve().parent.parent


def _write(path: Path, n: int = 6, key: bytes | None = None) -> list[dict]:
    with AuditLog(path, key=key) as log:
        ops = ["write", "read", "migrate", "delete"]
        return [log.record("room-a", ops[i % 4], [i, i + 1], source=f"layer{i % 2}", tier="L2") for i in range(n)]


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines(keepends=True)


def test_chain_verifies_and_links(tmp_path):
    path = tmp_path / "audit.jsonl"
    records = _write(path)
    result = verify(path)
    assert result.ok and result.records == 6 and result.bad_line is None
    assert result.head == records[-1]["hash"]
    assert records[0]["prev"] == GENESIS
    assert all(b["prev"] == a["hash"] for a, b in zip(records, records[1:]))
    first = json.loads(_lines(path)[0])
    assert first["session"] == "room-a" and first["op"] == "write" and first["blocks"] == [0, 1]
    assert first["source"] == "layer0" and first["details"] == {"tier": "L2"} and first["time"] > 0


@pytest.mark.parametrize(
    "tamper, bad_line, reason",
    [
        (lambda ls: ls[:2] + [ls[2].replace('"blocks":[2,3]', '"blocks":[2,9]')] + ls[3:], 3, "edited"),
        (lambda ls: ls[:2] + [ls[2].replace('"op":"migrate"', '"op":"read"')] + ls[3:], 3, "edited"),
        (lambda ls: ls[:3] + ls[4:], 4, "deleted"),
        (lambda ls: ls[1:], 1, "deleted"),
        (lambda ls: ls[:1] + [ls[2], ls[1]] + ls[3:], 2, "reordered"),
        (lambda ls: ls[:4] + ["{not json\n"] + ls[4:], 5, "not JSON"),
        (lambda ls: ls[:5] + [ls[5][: len(ls[5]) // 2]], 6, "not JSON"),
    ],
    ids=["edit-blocks", "edit-op", "delete-middle", "delete-first", "swap", "insert-garbage", "torn-tail"],
)
def test_tampering_is_found_at_its_line(tmp_path, tamper, bad_line, reason):
    path = tmp_path / "audit.jsonl"
    _write(path)
    path.write_text("".join(tamper(_lines(path))))
    result = verify(path)
    assert not result.ok
    assert result.bad_line == bad_line
    assert result.records == bad_line - 1
    assert {"edited": "edited", "deleted": "deleted", "reordered": "reordered", "not JSON": "not JSON"}[reason] in result.reason


def test_a_forged_record_needs_the_key(tmp_path):
    """Without a key anyone can recompute a chain; with one, a recomputed record does not verify."""
    path = tmp_path / "audit.jsonl"
    key = b"operator secret"
    _write(path, key=key)
    assert verify(path, key).ok
    assert not verify(path).ok  # the unkeyed hash is not the keyed one
    lines = _lines(path)
    forged = json.loads(lines[-1])
    forged["blocks"] = [99]
    import hashlib

    body = {k: v for k, v in forged.items() if k != "hash"}
    payload = forged["prev"].encode() + b"\n" + json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    forged["hash"] = hashlib.sha256(payload).hexdigest()
    path.write_text("".join(lines[:-1]) + json.dumps(forged, sort_keys=True, separators=(",", ":")) + "\n")
    result = verify(path, key)
    assert not result.ok and result.bad_line == len(lines) and "edited" in result.reason


def test_reopening_continues_the_chain_and_refuses_a_damaged_log(tmp_path):
    path = tmp_path / "audit.jsonl"
    _write(path, n=3)
    with AuditLog(path) as log:
        again = log.record("room-b", "delete", [7], source="manager")
    assert again["seq"] == 4 and verify(path).ok and verify(path).records == 4
    path.write_text("".join(_lines(path)[1:]))
    with pytest.raises(AuditError, match="line 1"):
        AuditLog(path)


def test_sinks_from_many_threads_keep_one_chain(tmp_path):
    path = tmp_path / "audit.jsonl"
    log = AuditLog(path)
    sinks = [log.sink(f"session-{i}") for i in range(4)]

    def hammer(sink) -> None:
        for j in range(50):
            sink("migrate", [j], source="L1->L2")

    threads = [threading.Thread(target=hammer, args=(s,)) for s in sinks]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    log.close()
    result = verify(path)
    assert result.ok and result.records == 200


def test_processes_sharing_one_log_keep_one_chain(tmp_path):
    """Two minutia processes with the same home (a bot and the live page) append to one log."""
    path = tmp_path / "audit.jsonl"
    AuditLog(path).close()
    code = ("import sys; from app.platform.audit import AuditLog; log = AuditLog(sys.argv[1]); "
            "[log.record(sys.argv[2], 'write', [i]) for i in range(150)]; log.close()")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(path), f"process-{i}"], cwd=ROOT) for i in range(3)]
    assert all(p.wait(timeout=120) == 0 for p in procs)
    result = verify(path)
    assert result.ok and result.records == 450, result


def test_bad_records_are_refused_without_breaking_the_chain(tmp_path):
    path = tmp_path / "audit.jsonl"
    with AuditLog(path) as log:
        with pytest.raises(AuditError, match="unknown audit operation"):
            log.record("s", "copy", [1])
        with pytest.raises(AuditError, match="integers or strings"):
            log.record("s", "read", [1.5])
        log.record("s", "read", [1])
    assert verify(path).ok and verify(path).records == 1


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "app.cli", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=120)


def test_cli_verify(tmp_path):
    path = tmp_path / "audit.jsonl"
    _write(path)
    ok = _cli("audit", "verify", str(path))
    assert ok.returncode == 0, ok.stderr
    assert "ok: 6 records" in ok.stdout
    lines = _lines(path)
    path.write_text("".join(lines[:2] + lines[3:]))
    bad = _cli("audit", "verify", str(path))
    assert bad.returncode == 1
    assert "line 3" in bad.stderr and "deleted" in bad.stderr
    missing = _cli("audit", "verify", str(tmp_path / "nope.jsonl"))
    assert missing.returncode == 2 and "is not a file" in missing.stderr


def test_session_store_operations_are_audited(tmp_path):
    """The app's session store: every block written, read and deleted lands in a chain that verifies."""
    import json

    from app.platform.config import load_settings
    from app.platform.store import open_session_store

    settings = load_settings(overrides={"home": str(tmp_path / "home")})
    store = open_session_store(settings)
    store.put("meeting-1", "b1", b"x" * 100, source="recording.ogg")
    assert store.get("meeting-1", "b1") == b"x" * 100
    assert store.delete("meeting-1", "b1")
    store.close()
    log = settings.home / "audit.log"
    ops = [json.loads(line)["op"] for line in log.read_text().splitlines()]
    assert ops == ["write", "read", "delete"]
    from app.platform.store import load_master_key

    assert verify(log, load_master_key(settings, create_key=False).audit_key()).ok
    assert oct((settings.home / "master.key").stat().st_mode & 0o777) == "0o600"


@pytest.mark.parametrize("tail", [b'{"seq": 7, "time": 17', b"\0\0\0\0", b'{"blocks":[1],"\xe2'])
def test_a_torn_tail_is_cut_and_recorded(tmp_path, tail):
    """What a crash mid-append leaves: a partial last line. The next writer cuts it, records the repair and
    the chain goes on; nothing before it is touched (a torn tail used to fail every resume)."""
    path = tmp_path / "audit.jsonl"
    _write(path)
    whole = path.read_bytes()
    path.write_bytes(whole + tail)
    result = verify(path)
    assert not result.ok and result.torn_at == len(whole) and result.records == 6
    with AuditLog(path) as log:
        log.record("room-a", "read", [1])
    assert path.read_bytes().startswith(whole)
    after = verify(path)
    assert after.ok and after.records == 8
    repair = json.loads(_lines(path)[6])
    assert repair["op"] == "repair" and repair["details"]["torn_tail_bytes"] == len(tail)
    cli = _cli("audit", "verify", str(path))
    assert cli.returncode == 0, cli.stderr


def test_a_whole_last_record_without_its_newline_is_kept(tmp_path):
    path = tmp_path / "audit.jsonl"
    _write(path, n=3)
    path.write_bytes(path.read_bytes().rstrip(b"\n"))
    assert verify(path).ok
    with AuditLog(path) as log:
        log.record("room-a", "read", [1])
    assert verify(path).ok and verify(path).records == 4


@pytest.mark.parametrize("damage", [b'{"seq": 3, "hash": "\xc3\xa9\xc3\xa9", "prev": "x"}\n', b"\xff\xfe not utf-8\n"])
def test_damage_before_the_end_is_refused_cleanly(tmp_path, damage):
    """Non-UTF-8 bytes or a non-ASCII hash in a whole line: the CLI says which line (no traceback), a writer
    refuses the log, and the session store turns that into a one-line error."""
    path = tmp_path / "audit.jsonl"
    _write(path, n=2)
    path.write_bytes(path.read_bytes() + damage)
    cli = _cli("audit", "verify", str(path))
    assert cli.returncode == 1 and "line 3" in cli.stderr and "Traceback" not in cli.stderr, cli.stderr
    with pytest.raises(AuditError, match="line 3"):
        AuditLog(path)

    from app.platform.config import load_settings
    from app.platform.store import open_session_store
    from encoders.errors import InputError

    settings = load_settings(overrides={"home": str(tmp_path / "home"), "store": {"audit_log": str(path)}})
    with pytest.raises(InputError, match="damaged at line 3"):
        open_session_store(settings)


def test_torn_cli_message(tmp_path):
    path = tmp_path / "audit.jsonl"
    _write(path, n=2)
    path.write_bytes(path.read_bytes() + b'{"seq": 3')
    cli = _cli("audit", "verify", str(path))
    assert cli.returncode == 1 and "torn" in cli.stderr and "2 records" in cli.stderr, cli.stderr


def test_every_read_path_is_audited(tmp_path):
    """Resume and cold-tier recall read with ``read_with`` (a lent view), not ``get``: those reads are in the log."""
    from app.platform.config import load_settings
    from app.platform.store import open_session_store

    settings = load_settings(overrides={"home": str(tmp_path / "home")})
    store = open_session_store(settings)
    store.put("m", "b1", b"y" * 64, source="mic")
    assert store.read_with("m", "b1", bytes) == b"y" * 64
    assert store.get_unverified("m", "b1") == b"y" * 64
    assert store.read_unverified("m", "b1", len) == 64
    store.close()
    records = [json.loads(line) for line in (settings.home / "audit.log").read_text().splitlines()]
    assert [r["op"] for r in records] == ["write", "read", "read", "read"]
    assert all(r["blocks"] == ["b1"] and r["session"] == "m" for r in records)
    assert all("@" in r["actor"] and "pid" in r["actor"] for r in records)  # operator and service
    from app.platform.store import load_master_key

    assert verify(settings.home / "audit.log", load_master_key(settings, create_key=False).audit_key()).ok


def test_the_session_store_log_is_keyed_by_default(tmp_path):
    """The store's log carries an HMAC keyed from the master key: a chain recomputed without it is caught, and
    `minutia audit verify` finds the key in the home by itself."""
    import hashlib
    import os

    from app.platform.config import load_settings
    from app.platform.store import load_master_key, open_session_store

    settings = load_settings(overrides={"home": str(tmp_path / "home")})
    store = open_session_store(settings)
    store.put("m", "b1", b"z" * 32, source="mic")
    store.get("m", "b1")
    store.close()
    log = settings.home / "audit.log"
    key = load_master_key(settings, create_key=False).audit_key()
    assert verify(log, key).ok and verify(log, key).keyed == 2
    assert "needs the key" in verify(log).reason
    env = {**os.environ, "MINUTIA_HOME": str(settings.home)}
    cli = subprocess.run([sys.executable, "-m", "app.cli", "audit", "verify", str(log)], capture_output=True,
                         text=True, cwd=ROOT, timeout=120, env=env)
    assert cli.returncode == 0 and "2 records (all keyed)" in cli.stdout, cli.stdout + cli.stderr
    # An edit recomputed end to end without the key, the "mac" marks dropped: a chain alone cannot tell that
    # from an old unkeyed log, so it verifies, but as unkeyed, which a log this store wrote never is.
    head, records = "0" * 64, []
    for line in log.read_text().splitlines():
        body = {k: v for k, v in json.loads(line).items() if k not in ("hash", "mac")}
        body["prev"], body["blocks"] = head, ["forged"]
        payload = head.encode() + b"\n" + json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
        head = hashlib.sha256(payload).hexdigest()
        records.append(json.dumps({**body, "hash": head}, sort_keys=True, separators=(",", ":")))
    log.write_text("\n".join(records) + "\n")
    result = verify(log, key)
    assert result.ok and result.keyed == 0  # an unkeyed chain verifies, but is reported as such
    cli = subprocess.run([sys.executable, "-m", "app.cli", "audit", "verify", str(log)], capture_output=True,
                         text=True, cwd=ROOT, timeout=120, env=env)
    assert "0 keyed, 2 unkeyed" in cli.stdout, cli.stdout


def test_forget_shreds_one_source_of_a_saved_meeting(tmp_path):
    """`minutia forget --session S --source X`: X's key is destroyed and its blocks deleted, a copy of them taken
    before cannot be decrypted, the other source stays readable, and the audit log records the forget."""
    import os

    from app.platform.config import load_settings
    from app.platform.store import load_master_key, open_session_store

    settings = load_settings(overrides={"home": str(tmp_path / "home")})
    store = open_session_store(settings)
    store.put("m", "a1", b"alice said 4242" * 4, source="mic-alice")
    store.put("m", "b1", b"bob said 1717" * 4, source="mic-bob")
    copy = store._inner.inner.get("m", "a1")  # a backup of the ciphertext, taken before the forget
    store.close()
    env = {**os.environ, "MINUTIA_HOME": str(settings.home)}

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "app.cli", "forget", *args], capture_output=True, text=True,
                              cwd=ROOT, timeout=120, env=env)

    listed = cli("--session", "m")
    assert listed.returncode == 0 and listed.stdout.split() == ["mic-alice", "mic-bob"], listed.stderr
    unknown = cli("--session", "m", "--source", "mic-carol")
    assert unknown.returncode == 2 and "no source 'mic-carol'" in unknown.stderr and "Traceback" not in unknown.stderr
    missing = cli("--session", "nope", "--source", "mic-alice")
    assert missing.returncode == 2 and "no saved session" in missing.stderr
    done = cli("--session", "m", "--source", "mic-alice")
    assert done.returncode == 0 and "1 key destroyed, 1 block deleted" in done.stdout, done.stdout + done.stderr

    store = open_session_store(settings)
    try:
        assert store.sources("m") == ["mic-bob"] and store.list("m") == ["b1"]
        assert store.get("m", "b1") == b"bob said 1717" * 4
        assert store._inner.verify_shredded("mic-alice", [("m", "a1", copy)])
    finally:
        store.close()
    records = [json.loads(line) for line in (settings.home / "audit.log").read_text().splitlines()]
    forgot = [r for r in records if r["op"] == "delete" and r.get("details", {}).get("shredded")]
    assert forgot and forgot[-1]["session"] == "m" and forgot[-1]["source"] == "mic-alice"
    assert verify(settings.home / "audit.log", load_master_key(settings, create_key=False).audit_key()).ok


def test_a_torn_tail_left_by_another_process_is_cut_by_a_running_writer(tmp_path):
    """A long-running writer (a bot) whose log gets a partial line from a crashed process cuts it at its next
    append instead of failing every audited operation until a new process opens the log."""
    path = tmp_path / "audit.jsonl"
    with AuditLog(path) as log:
        log.record("room-a", "write", [1])
        with open(path, "ab") as other:
            other.write(b'{"seq": 2, "time": 17')  # another process died mid-append
        log.record("room-a", "read", [1])
    result = verify(path)
    assert result.ok and result.records == 3, result
    ops = [json.loads(line)["op"] for line in _lines(path)]
    assert ops == ["write", "repair", "read"]


def test_a_record_longer_than_64_kib_does_not_break_the_next_writer(tmp_path):
    path = tmp_path / "audit.jsonl"
    first, second = AuditLog(path), AuditLog(path)
    first.record("m", "delete", [f"L{i}.b{i}.0123456789abcdef" for i in range(4000)])  # ~130 KB line
    second.record("m", "read", [1])  # continues the chain past the long line
    first.close(), second.close()
    assert verify(path).ok and verify(path).records == 2


def test_stores_with_different_master_keys_share_one_log(tmp_path):
    """A bot with MINUTIA_MASTER_KEY and a CLI with the home's key file append to one log: each verifies its
    own records and checks the links of the other's (it used to refuse the log as edited)."""
    path = tmp_path / "audit.jsonl"
    with AuditLog(path, key=b"key-a") as a:
        a.record("m", "write", [1])
    with AuditLog(path, key=b"key-b") as b:  # opens a log holding key-a records
        b.record("m", "read", [1])
    with AuditLog(path, key=b"key-a") as a:
        a.record("m", "read", [2])
    for key, other, foreign in ((b"key-a", b"key-b", 1), (b"key-b", b"key-a", 2)):
        result = verify(path, key, [other])
        assert result.ok and result.records == 3 and result.keyed == 3 and result.foreign == foreign, result
        alone = verify(path, key)  # issue 49 F2: a record under a key nobody checks does not pass as verified
        assert not alone.ok and "was not given" in alone.reason, alone
    lines = _lines(path)
    edited = json.loads(lines[0])
    edited["blocks"] = [99]
    path.write_text(json.dumps(edited, sort_keys=True, separators=(",", ":")) + "\n" + "".join(lines[1:]))
    assert "edited" in verify(path, b"key-a").reason  # its own key still catches an edit of its record


def test_an_edited_record_naming_an_unknown_key_does_not_verify(tmp_path):
    """Issue 49 F2: a record rewritten as another actor's read under a made-up key id, its hash kept, passed as
    "under another master key"."""
    path = tmp_path / "audit.jsonl"
    with AuditLog(path, key=b"key-a") as log:
        for i in range(4):
            log.record("m", "write", [i])
    lines = _lines(path)
    forged = json.loads(lines[2])
    forged.update(op="read", session="nobody", actor="intruder", kid="0000000000000000")
    path.write_text("".join(lines[:2]) + json.dumps(forged, sort_keys=True, separators=(",", ":")) + "\n"
                    + "".join(lines[3:]))
    result = verify(path, b"key-a")
    assert not result.ok and result.bad_line == 3 and "0000000000000000" in result.reason
    assert not verify(path, b"key-a", [b"key-b"]).ok  # nor with another key that is not the one it names


def test_the_log_is_readable_by_its_owner_only(tmp_path):
    """Issue 49: audit.log was 0644; it says who read which meeting and when. An old 0644 log is tightened."""
    import os
    import stat

    path = tmp_path / "audit.jsonl"
    with AuditLog(path) as log:
        log.record("m", "write", [1])
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    os.chmod(path, 0o644)
    with AuditLog(path) as log:
        log.record("m", "read", [1])
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


@pytest.mark.parametrize("create_key", [True, False], ids=["live-save", "resume"])
def test_a_missing_master_key_with_meetings_saved_is_an_error_not_a_new_key(tmp_path, create_key):
    """Issue 49 F8: with master.key deleted, resume said "nothing was saved here" and the next `live --save` made a
    new key, after which the saved meetings could never be opened."""
    from app.platform.config import load_settings
    from app.platform.store import open_session_store
    from encoders.errors import InputError

    settings = load_settings(overrides={"home": str(tmp_path / "home")})
    store = open_session_store(settings)
    store.put("meeting-1", "b1", b"x" * 100, source="recording.ogg")
    store.close()
    key = settings.home / "master.key"
    kept = key.read_bytes()
    key.unlink()
    with pytest.raises(InputError, match=r"master key .* is missing, and 1 saved meeting"):
        open_session_store(settings, create_key=create_key)
    assert not key.exists()  # no new key was made
    key.write_bytes(kept)
    key.chmod(0o600)
    again = open_session_store(settings, create_key=False)
    assert again.get("meeting-1", "b1") == b"x" * 100  # the key put back opens them again
    again.close()
