"""``nbxsig`` as a real process: killed mid-run and resumed, decode workers, progress on a terminal."""

from __future__ import annotations

import hashlib
import json
import os
import pty
import re
import select
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from nbxsig import io as nio

NBXSIG = [sys.executable, "-m", "nbxsig.cli.main"]


def _env() -> dict[str, str]:
    env = os.environ.copy()
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _folder(root: Path, n: int, *, samples: int = 4000) -> Path:
    rng = np.random.default_rng(0)
    d = root / "in"
    for i in range(n):
        sub = d / f"g{i % 3}"
        sub.mkdir(parents=True, exist_ok=True)
        nio.write_audio(sub / f"f{i:03d}.wav", 0.1 * rng.standard_normal((1, samples + 7 * i)), 16000)
    return d


def _hashes(folder: Path) -> dict[str, str]:
    return {
        str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*")) if p.is_file()
    }


def _check_outputs(out: Path, *, bins: int = 33) -> list[Path]:
    """Every output under its final name is complete: it loads and has the expected shape."""
    done = sorted(out.rglob("*.npz"))
    for p in done:
        spec = np.load(p)["spec"]
        assert spec.shape[:2] == (1, bins)
    return done


def test_killed_mid_run_then_resumed(tmp_path: Path) -> None:
    n = 60
    src = _folder(tmp_path, n)
    before = _hashes(src)
    out = tmp_path / "out"
    cmd = [*NBXSIG, "stft", str(src), "-o", str(out), "--n-fft", "64", "-j", "0", "--batch-size", "1"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env())
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if len(list(out.rglob("*.npz"))) >= 5:
            break
        time.sleep(0.002)
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    assert proc.returncode == -signal.SIGKILL, "the run finished before it could be killed"
    first = _check_outputs(out)
    assert 5 <= len(first) < n
    # Only complete files carry final names; a write cut short is at most a hidden temporary.
    assert all(
        p.name.endswith((".npz", ".jsonl")) or nio.is_temp_name(p.name) for p in out.rglob("*") if p.is_file()
    )

    resume = [*cmd[:-2], "--batch-size", "16"]
    result = subprocess.run(resume, capture_output=True, text=True, env=_env())
    assert result.returncode == 0, result.stderr
    assert f"{n - len(first)} ok, 0 failed, {len(first)} skipped" in result.stderr
    assert len(_check_outputs(out)) == n
    leftovers = [p for p in out.rglob("*") if p.is_file() and not p.name.endswith((".npz", ".jsonl"))]
    assert leftovers == []  # stale temporaries of the killed writer were removed
    rows = [json.loads(line) for line in (out / "manifest.jsonl").read_text().splitlines()]
    assert len(rows) == n and {r["status"] for r in rows} == {"ok", "skipped"}
    assert _hashes(src) == before


def test_sigterm_leaves_no_temporaries(tmp_path: Path) -> None:
    src = _folder(tmp_path, 100)
    out = tmp_path / "out"
    cmd = [*NBXSIG, "stft", str(src), "-o", str(out), "--n-fft", "64", "-j", "0", "--batch-size", "1"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env())
    while proc.poll() is None and len(list(out.rglob("*.npz"))) < 5:
        time.sleep(0.002)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert b"(interrupted)" in err
    _check_outputs(out)
    assert [p for p in out.rglob("*") if p.is_file() and nio.is_temp_name(p.name)] == []


def _children(pid: int) -> set[int]:
    """Processes whose parent is ``pid`` (from /proc)."""
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.add(int(stat.parent.name))
    return found


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state in ("Z", "X")  # a zombie has stopped running


def test_sigterm_with_decode_workers_stops_them_and_leaves_no_temporaries(tmp_path: Path) -> None:
    src = _folder(tmp_path, 80)
    out = tmp_path / "out"
    cmd = [*NBXSIG, "stft", str(src), "-o", str(out), "--n-fft", "64", "-j", "2", "--batch-size", "1"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env())
    workers: set[int] = set()
    while proc.poll() is None and len(list(out.rglob("*.npz"))) < 5:
        workers |= _children(proc.pid)
        time.sleep(0.002)
    workers |= _children(proc.pid)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert len(workers) >= 2  # the decode workers (and multiprocessing's resource tracker)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not all(_gone(pid) for pid in workers):
        time.sleep(0.05)
    assert all(_gone(pid) for pid in workers), "a decode worker outlived the run"
    _check_outputs(out)
    assert [p for p in out.rglob("*") if p.is_file() and nio.is_temp_name(p.name)] == []


def test_decode_workers_and_no_progress_off_a_terminal(tmp_path: Path) -> None:
    src = _folder(tmp_path, 12, samples=1000)
    nio.write_audio(src / "x.flac", np.full((1, 1030), 0.25), 16000)
    np.save(src / "y.npy", np.full((1, 1040), 0.5, np.float32))
    (src / "broken.wav").write_bytes(b"RIFF....WAVE")
    (src / "empty.flac").write_bytes(b"")
    np.save(src / "nan.npy", np.full((1, 1000), np.nan, np.float32))
    before = _hashes(src)
    out = tmp_path / "out"
    cmd = [*NBXSIG, "stft", str(src), "-o", str(out), "--n-fft", "32", "-j", "2", "--batch-size", "7", "-v"]
    result = subprocess.run(cmd, capture_output=True, text=True, env=_env())
    assert result.returncode == 1
    assert "14 ok, 3 failed, 0 skipped in " in result.stderr
    batches = re.search(r"in (\d+) batches", result.stderr)  # -v
    assert "files/s" in result.stderr and batches is not None
    assert 2 <= int(batches.group(1)) <= 4  # 14 similar lengths, batches of ≤ 7, ≤ 2 length buckets
    assert "\r" not in result.stderr and "file/s" not in result.stderr  # no progress bar in a pipe
    assert len(_check_outputs(out, bins=17)) == 14
    assert _hashes(src) == before


@pytest.mark.skipif(not hasattr(pty, "openpty"), reason="needs a pseudo-terminal")
def test_progress_bar_on_a_terminal(tmp_path: Path) -> None:
    import fcntl
    import struct
    import termios

    src = _folder(tmp_path, 4, samples=500)
    master, slave = pty.openpty()
    # A fresh pseudo-terminal is 0 columns wide; give it a real size as a terminal window has.
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    cmd = [*NBXSIG, "stft", str(src), "-o", str(tmp_path / "out"), "--n-fft", "32", "-j", "0"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=slave, env=_env())
    os.close(slave)
    chunks = []
    while True:
        ready, _, _ = select.select([master], [], [], 60)
        if not ready:
            break
        try:
            data = os.read(master, 4096)
        except OSError:  # the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=60)
    os.close(master)
    text = b"".join(chunks).decode(errors="replace")
    assert "4/4" in text and "file/s" in text  # tqdm's bar
    assert "4 ok, 0 failed, 0 skipped" in text


def test_console_script_is_installed() -> None:
    exe = shutil.which(
        "nbxsig", path=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")
    )
    if exe is None:
        pytest.skip("the nbxsig console script is not on PATH (package not pip-installed)")
    result = subprocess.run([exe, "--help"], capture_output=True, text=True, env=_env())
    assert result.returncode == 0 and "istft" in result.stdout


def test_the_cli_and_its_workers_import_no_torch() -> None:
    """Decode workers import the CLI's modules: they must stay light (no torch, soundfile only on use)."""
    code = (
        "import sys, nbxsig.cli.main\n"
        "print(sorted(m for m in ('torch', 'soundfile', 'matplotlib') if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env())
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_killed_mid_run_with_worker_writes_then_resumed(tmp_path: Path) -> None:
    """The decode workers write the outputs: the whole process group killed mid-run leaves only complete
    files (and at most hidden temporaries, which the resumed run removes)."""
    n = 80
    src = _folder(tmp_path, n)
    before = _hashes(src)
    out = tmp_path / "out"
    cmd = [*NBXSIG, "stft", str(src), "-o", str(out), "--n-fft", "64", "-j", "2", "--batch-size", "1", "-v"]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env(), start_new_session=True
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None and len(list(out.rglob("*.npz"))) < 5:
        time.sleep(0.002)
    os.killpg(proc.pid, signal.SIGKILL)  # the main process and its workers, mid-write
    proc.communicate()
    assert proc.returncode == -signal.SIGKILL, "the run finished before it could be killed"
    first = _check_outputs(out)
    assert 5 <= len(first) < n
    assert all(
        p.name.endswith((".npz", ".jsonl")) or nio.is_temp_name(p.name) for p in out.rglob("*") if p.is_file()
    )
    result = subprocess.run(cmd, capture_output=True, text=True, env=_env())
    assert result.returncode == 0, result.stderr
    assert f"{n - len(first)} ok, 0 failed, {len(first)} skipped" in result.stderr
    assert f"workers: {n - len(first)} files" in result.stderr  # the workers wrote them
    assert len(_check_outputs(out)) == n
    assert [p for p in out.rglob("*") if p.is_file() and not p.name.endswith((".npz", ".jsonl"))] == []
    assert _hashes(src) == before


#: A warning as Python prints it when nothing catches it: ``/path/file.py:123: UserWarning: text``.
_RAW_WARNING = re.compile(r"^.*\.py:\d+: \w*Warning: ", re.MULTILINE)


def test_warnings_reach_stderr_as_the_cli_s_own_lines(tmp_path: Path) -> None:
    """A real process with Python's default warning filters: a warning about the user's request or
    input (nbxsig's empty mel filters, as torchaudio warns; PIL's image size limit) reaches stderr as
    ``nbxsig: warning: FILE: ...``, never as a raw ``file.py:123: UserWarning: ...`` line."""
    from PIL import Image

    src = _folder(tmp_path, 6, samples=900)  # 16 kHz
    env = {k: v for k, v in _env().items() if k != "PYTHONWARNINGS"}
    args = ["--n-fft", "64", "--hop-length", "16", "--n-mels", "40", "-j", "2"]
    for command in (["mel", *args], ["vad", "--frame-ms", "4", "--n-mels", "40", "-j", "2"]):
        cmd = [*NBXSIG, *command, str(src), "-o", str(tmp_path / command[0])]
        result = subprocess.run(cmd, capture_output=True, text=True, env=env)
        assert result.returncode == 0, result.stderr
        assert not _RAW_WARNING.search(result.stderr), result.stderr
        lines = [line for line in result.stderr.splitlines() if line.startswith("nbxsig: warning: ")]
        assert len(lines) == 1 and "7 of the 40 mel filters are empty (all zero) at 16000 Hz" in lines[0]
        assert re.match(
            rf"nbxsig: warning: {re.escape(str(src))}/g\d/f\d+\.wav: 7 of", lines[0]
        )  # one of them
        # With decode (and write) workers too, every file's row keeps the message stderr says once.
        written = (tmp_path / command[0] / "manifest.jsonl").read_text()
        rows = [json.loads(line) for line in written.splitlines()]
        said = lines[0].split(": ", 3)[3]
        assert len(rows) == 6 and all(r["status"] == "ok" and r["warnings"] == [said] for r in rows), rows
    Image.new("1", (10000, 9000)).save(tmp_path / "big.png")  # 90 Mpixels (11 kB): over PIL's limit
    result = subprocess.run(
        [*NBXSIG, "info", str(tmp_path / "big.png")], capture_output=True, text=True, env=env
    )
    assert result.returncode == 0, result.stderr
    assert not _RAW_WARNING.search(result.stderr), result.stderr
    assert result.stderr.startswith(f"nbxsig: warning: {tmp_path / 'big.png'}: Image size (90000000 pixels)")
    assert result.stdout == f"{tmp_path / 'big.png'}: image PNG 1, 10000×9000\n"
