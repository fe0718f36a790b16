"""This node's logs for a job's window, and the lines of them worth sending: what the node collector reads.

Each reader takes the job's part of one log, bounded in bytes and time: the kernel's journal (`journalctl -k`,
the kernel transport only), the ring buffer (/dev/kmsg, what dmesg reads) or a kernel log file from the prolog's
offset, and the Fabric Manager log from its offset. Of what it read, a log keeps the lines holding one of the
filter's fixed strings (hooks/suspicious.patterns, generated from the rule pack: every line a node-side rule can
match holds one) with CONTEXT lines around each (a record's continuation lines), and the error-looking lines
(hooks/error-lines.patterns, also generated: what a later rule pack may know, kept for replay), as blocks of
consecutive lines with the number of their first line. What a line means is decided at the centre, which parses the blocks with the
rule pack; nothing here knows a log format.

Standard library only, as everything in attribution/node.
"""

from __future__ import annotations

import os
import time

__all__ = ["CONTEXT", "read_filter", "read_error_lines", "select_lines", "read_kernel", "read_file",
           "journal_available"]

#: Lines kept before and after each matching line (a record's continuation lines: the centre joins at most 16)
CONTEXT = 16
#: Characters of one kept line (the centre keeps at most 4096 of a line for replay)
LINE_CHARS = 8192


def read_filter(path: str) -> list[bytes]:
    """The filter's fixed strings, one a line (blank lines ignored). Raises OSError when unreadable."""
    with open(path, "rb") as f:
        return [s for s in f.read(1 << 20).splitlines() if s.strip()]


#: From this size on, the lines holding fixed strings are found by grep -F, in one pass for all the strings (Python
#: makes one pass per string: 8 s for the 76 strings over 100 MB of kernel log, grep 0.3 s); below it a process
#: start costs more than the passes
GREP_FROM_BYTES = 4 << 20
GREP = ("/usr/bin/grep", "/bin/grep")


def _grep(data: bytes, args: list[str], strings: list[bytes], deadline: float | None) -> list[bytes] | None:
    """GNU grep -F's output lines over `data` for `strings`, in the C locale (bytes, NULs as text); None when
    there is no grep, it fails or would outlive `deadline` (then the caller searches itself)."""
    import subprocess

    grep = next((g for g in GREP if os.access(g, os.X_OK)), None)
    if grep is None or not strings:
        return None
    timeout = None if deadline is None else deadline - time.monotonic()
    if timeout is not None and timeout <= 0:
        return None
    cmd = [grep, "-F", "-a", "-b"] + args
    for s in strings:
        cmd += ["-e", s]
    try:
        run = subprocess.run(cmd, input=data, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=timeout,
                             env={"LC_ALL": "C", "PATH": "/usr/bin:/bin"})
    except (OSError, subprocess.SubprocessError):
        return None
    if run.returncode not in (0, 1):
        return None
    return run.stdout.split(b"\n")


def _grep_starts(data: bytes, strings: list[bytes], deadline: float | None = None) -> list[int] | None:
    """The start offsets of the lines of `data` holding one of `strings` (grep -F -b), or None (_grep)."""
    out = _grep(data, [], strings, deadline)
    return None if out is None else [int(line.partition(b":")[0]) for line in out if b":" in line]


def _overlapping(strings: list[bytes]) -> list[int]:
    """For each of `strings` (none holding another), a bit per string whose occurrence may start inside one of
    it: what grep -o, which goes on after each match, may not report beside it."""
    out = []
    for a in strings:
        mask = 0
        for bit, b in enumerate(strings):
            if any(b.startswith(a[k:]) for k in range(1, len(a))):
                mask |= 1 << bit
        out.append(mask)
    return out


def _grep_candidates(data: bytes, strings: list[bytes], deadline: float | None) -> list | None:
    """_candidates by grep -F -i -o -b (one pass for all the strings: each occurrence's offset and text), the
    strings a line holds being those reported on it and those that may overlap them; None (_grep)."""
    out = _grep(data, ["-i", "-o"], strings, deadline)
    if out is None:
        return None
    index = {s: bit for bit, s in enumerate(strings)}
    overlap = _overlapping(strings)
    starts: dict[int, int] = {}
    for line in out:
        head, sep, text = line.partition(b":")
        bit = index.get(text.lower()) if sep else None
        if bit is None:
            continue
        pos = int(head)
        start = data.rfind(b"\n", 0, pos) + 1
        starts[start] = starts.get(start, 0) | 1 << bit | overlap[bit]
    n, cands = len(data), []
    for start in sorted(starts):
        end = data.find(b"\n", start)
        cands.append((start, n if end < 0 else end, starts[start]))
    return cands


def _line_starts(data: bytes, strings: list[bytes], deadline: float | None = None) -> list[int]:
    """The start offsets of the lines of `data` holding any of `strings` (each found with bytes.find, or all by
    grep in one pass in a large `data`)."""
    if len(data) >= GREP_FROM_BYTES:
        found = _grep_starts(data, strings, deadline)
        if found is not None:
            return found
    starts: set[int] = set()
    for s in strings:
        i = data.find(s)
        while i >= 0:
            start = data.rfind(b"\n", 0, i) + 1
            starts.add(start)
            nl = data.find(b"\n", i)
            if nl < 0:
                break
            i = data.find(s, nl + 1)
    return sorted(starts)


def read_error_lines(path: str):
    """The error-looking lines' patterns (hooks/error-lines.patterns, generated from the pack's
    replay/error-lines.txt) as (one case-insensitive regex over bytes, the informational lines' regex or None,
    the lower-case strings one of which every match holds or None, {string: the regex of the patterns that need
    it} or None), or None (no file, or none of its patterns compiles here). A `!pattern` line gives lines never
    error-looking (an NCCL INFO line), a `=string` line one of those strings (with them the patterns are tried
    only on the lines holding one: ~50x faster); a pattern's line may end with its own strings after tabs
    (`PATTERN<TAB>=s1<TAB>=s2`: a line is tried only with the patterns of the strings it holds, ~4x faster)."""
    import re

    try:
        with open(path, "rb") as f:
            raw = [p.strip() for p in f.read(1 << 20).splitlines() if p.strip()]
    except OSError:
        return None
    good: dict[bool, list[bytes]] = {True: [], False: []}
    strings = [p[1:].lower() for p in raw if p.startswith(b"=") and len(p) > 1]
    needs: dict[bytes, list[bytes]] = {}
    every_line = False  # a pattern without its strings: the patterns together on every candidate line
    for p in raw:
        if p.startswith(b"="):
            continue
        negated = p.startswith(b"!")
        body, *own = (p[1:] if negated else p).split(b"\t")
        try:
            re.compile(body)
        except re.error:
            continue  # a pattern only RE2 takes: the centre's keeper still applies it to what arrives
        group = b"(?:" + body + b")"
        good[not negated].append(group)
        if not negated:
            mine = [s[1:].lower() for s in own if s.startswith(b"=") and len(s) > 1]
            every_line = every_line or not mine
            for s in mine:
                needs.setdefault(s, []).append(group)

    def one(patterns):
        return re.compile(b"|".join(patterns), re.IGNORECASE | re.MULTILINE) if patterns else None

    if not good[True]:
        return None
    by_string = None
    if strings and not every_line and set(needs) <= set(strings):
        by_string = {s: one(needs[s]) for s in strings if s in needs}
    return one(good[True]), one(good[False]), strings or None, by_string


def _candidates(data: bytes, strings: list[bytes], deadline: float | None = None) -> list[tuple[int, int, int]]:
    """(start, end, which strings: a bit per index of `strings`) of every line of `data` holding one of `strings`
    (lower case) case-insensitively, in order."""
    n = len(data)
    if n >= GREP_FROM_BYTES:
        found = _grep_candidates(data, strings, deadline)
        if found is not None:
            return found
    low = data.lower()
    starts: dict[int, int] = {}
    for bit, s in enumerate(strings):
        mask = 1 << bit
        pos = low.find(s)
        while pos >= 0:
            start = low.rfind(b"\n", 0, pos) + 1
            starts[start] = starts.get(start, 0) | mask
            end = low.find(b"\n", pos)
            if end < 0:
                break
            pos = low.find(s, end + 1)
    out = []
    for start in sorted(starts):
        end = data.find(b"\n", start)
        out.append((start, n if end < 0 else end, starts[start]))
    return out


def _error_lines(data: bytes, errorlike, limit: int, deadline: float | None = None) -> tuple[list[int], bool]:
    """The starts of the error-looking lines of `data` (at most `limit`, found before `deadline`: monotonic) and
    whether there were more (or the time ran out)."""
    found, informational, strings, by_string = errorlike
    out: list[int] = []
    if strings:
        tried: dict[int, list] = {}  # the strings a line holds -> the patterns to try on it
        for i, (start, end, held) in enumerate(_candidates(data, strings, deadline)):
            if deadline is not None and not i % 256 and time.monotonic() > deadline:
                return out, True
            line = data[start:end]
            if by_string is None:
                hit = found.search(line)
            else:
                regexes = tried.get(held)
                if regexes is None:
                    regexes = tried[held] = [by_string[s] for bit, s in enumerate(strings)
                                             if held >> bit & 1 and s in by_string]
                hit = any(r.search(line) for r in regexes)
            if hit and (informational is None or not informational.search(line)):
                if len(out) == limit:
                    return out, True
                out.append(start)
        return out, False
    pos, n = 0, len(data)
    while pos < n:
        if deadline is not None and time.monotonic() > deadline:
            return out, True
        m = found.search(data, pos)
        if m is None:
            break
        start = data.rfind(b"\n", 0, m.start()) + 1
        end = data.find(b"\n", m.end())
        end = n if end < 0 else end
        if informational is None or not informational.search(data[start:end]):
            if len(out) == limit:
                return out, True
            out.append(start)
        pos = end + 1
    return out, False


def _numbers(data: bytes, starts: list[int]) -> list[int]:
    """The 0-based line number of each line start in `starts` (sorted): newlines before it, in one pass."""
    numbers, last, count = [], 0, 0
    for s in starts:
        count += data.count(b"\n", last, s)
        numbers.append(count)
        last = s
    return numbers


def select_lines(data: bytes, strings: list[bytes], first_line: int = 1, max_bytes: int = 8 << 20,
                 context: int = CONTEXT, errorlike=None, max_errorlike: int = 2000,
                 deadline: float | None = None) -> tuple[list, int, bool]:
    """(blocks, lines in `data`, whether the kept lines hit a bound): the lines holding a filter string, each
    with `context` lines before and after, and the error-looking lines (`errorlike`: read_error_lines; at most
    `max_errorlike` of them, alone, those found before `deadline`: time.monotonic()), as [[number of the block's
    first line, [line, ...]], ...], numbers counting
    from `first_line`, at most `max_bytes` of text. Lines are text (UTF-8, undecodable bytes replaced). The error-
    looking lines are kept for replay: a later rule pack may know what this one does not (docs/replay.md)."""
    total = data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)
    starts = _line_starts(data, strings, deadline)
    wanted: list[tuple[int, int]] = []  # (first, last) line numbers, 0-based
    for n in _numbers(data, starts):
        wanted.append((n - context, n + context))
    cut = False
    if errorlike is not None and data:
        alone, cut = _error_lines(data, errorlike, max_errorlike, deadline)
        wanted += [(n, n) for n in _numbers(data, alone)]
    if not wanted:
        return [], total, cut
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    spans: list[list[int]] = []
    for lo, hi in sorted(wanted):
        lo, hi = max(0, lo), min(len(lines) - 1, hi)
        if spans and lo <= spans[-1][1] + 1:
            spans[-1][1] = max(spans[-1][1], hi)
        else:
            spans.append([lo, hi])
    blocks, kept = [], 0
    for lo, hi in spans:
        out = []
        for raw in lines[lo:hi + 1]:
            # a NUL (a log file's padding after a crash) is no text: a space, so the line stays one line
            text = raw[:LINE_CHARS].replace(b"\0", b" ").decode("utf-8", "replace").rstrip("\r")
            kept += len(text) + 1
            if kept > max_bytes:
                cut = True
                break
            out.append(text)
        if out:
            blocks.append([first_line + lo, out])
        if cut:
            break
    return blocks, total, cut


def read_file(path: str, offset: int, max_bytes: int) -> tuple[bytes | None, dict]:
    """The bytes of a log file from `offset` (where the prolog found it at the job's start; 0 or past the end:
    unknown or rotated, then its last `max_bytes`), at most `max_bytes`; and what the read was (a log's
    fields: status, reason, notes). Only a regular file is read, without blocking."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None, {"status": "missing", "reason": "no file"}
    except OSError as exc:
        return None, {"status": "error", "reason": f"cannot read: {exc.strerror or exc}"}
    notes: list[str] = []
    try:
        st = os.fstat(fd)
        import stat

        if not stat.S_ISREG(st.st_mode):
            return None, {"status": "error", "reason": "not a regular file"}
        size = st.st_size
        if 0 < offset <= size:
            start = offset
            notes.append(f"read from byte {offset} (job start)")
        else:
            start = max(0, size - max_bytes)
            if start:
                notes.append(f"no job-start offset: read the last {max_bytes} bytes (from byte {start})")
        os.lseek(fd, start, os.SEEK_SET)
        chunks, got = [], 0
        while got < max_bytes:
            b = os.read(fd, min(1 << 20, max_bytes - got))
            if not b:
                break
            chunks.append(b)
            got += len(b)
        data = b"".join(chunks)
        if size - start > max_bytes:
            notes.append(f"read only {max_bytes} bytes of {size - start} since the job started")
        if start and start != offset:  # from the middle of a line: that line starts before what was read
            nl = data.find(b"\n")
            data = data[nl + 1:] if nl >= 0 else b""
    except OSError as exc:
        return None, {"status": "error", "reason": f"cannot read: {exc.strerror or exc}"}
    finally:
        os.close(fd)
    return data, {"status": "ok" if data else "empty", "notes": notes}


def journal_available() -> bool:
    return os.path.exists("/usr/bin/journalctl") and (os.path.isdir("/run/systemd/journal")
                                                       or os.path.isdir("/var/log/journal"))


def read_journal(since: float, until: float, timeout: float, max_bytes: int,
                 journalctl: str = "/usr/bin/journalctl") -> tuple[bytes | None, dict]:
    """The kernel's journal between two epoch times, through the kernel transport only (`-k` is
    _TRANSPORT=kernel of this boot, said again as a match: what `logger` writes is not read), at most
    `max_bytes` of it, within `timeout` seconds."""
    import subprocess

    cmd = [journalctl, "-k", "_TRANSPORT=kernel", "--no-pager", "-q", "-o", "short-iso-precise",
           f"--since=@{int(since)}", f"--until=@{int(until) + 1}"]
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                env={"PATH": "/usr/bin:/bin", "LC_ALL": "C", "SYSTEMD_COLORS": "0"})
    except OSError as exc:
        return None, {"status": "error", "reason": f"journalctl: {exc.strerror or exc}"}
    out, err, cut = _bounded(proc, time.monotonic() + timeout, max_bytes)
    if out is None:
        return None, {"status": "error", "reason": f"journalctl: no answer within {timeout:.0f} s"}
    if proc.returncode not in (0, None) and not out and not cut:
        first = err.decode("utf-8", "replace").strip().splitlines()
        return None, {"status": "error", "reason": f"journalctl: {first[0] if first else proc.returncode}"}
    notes = [f"read only the first {max_bytes} bytes of the window"] if cut else []
    return out, {"status": "ok" if out else "empty", "notes": notes}


def _bounded(proc, deadline: float, max_bytes: int) -> tuple[bytes | None, bytes, bool]:
    """A child's output, at most `max_bytes` (it is killed there) and 64 KiB of its errors, by `deadline`
    (None: it outlived it and was killed)."""
    import selectors

    chunks, got, cut, err = [], 0, False, b""
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    sel.register(proc.stderr, selectors.EVENT_READ)
    open_ = 2
    try:
        while open_:
            left = deadline - time.monotonic()
            if left <= 0:
                return None, err, False
            for key, _ in sel.select(left):
                data = os.read(key.fileobj.fileno(), 1 << 20)
                if not data:
                    sel.unregister(key.fileobj)
                    open_ -= 1
                elif key.fileobj is proc.stderr:
                    err = (err + data)[:65536]
                else:
                    chunks.append(data[: max_bytes - got])
                    got += len(chunks[-1])
                    if got >= max_bytes:
                        cut = True
                        open_ = 0
                        break
    finally:
        sel.close()
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        proc.stdout.close()
        proc.stderr.close()
    return b"".join(chunks), err, cut


def read_kmsg(device: str = "/dev/kmsg", max_bytes: int = 64 << 20) -> tuple[bytes | None, dict]:
    """The kernel ring buffer, record by record, without blocking (what `dmesg` reads)."""
    try:
        fd = os.open(device, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        return None, {"status": "error", "reason": f"cannot read {device}: {exc.strerror or exc}"}
    chunks, got = [], 0
    try:
        while got < max_bytes:
            try:
                rec = os.read(fd, 8192)
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno == 32:  # EPIPE: records were overwritten while reading; continue with the next
                    continue
                break
            if not rec:
                break
            chunks.append(rec if rec.endswith(b"\n") else rec + b"\n")
            got += len(chunks[-1])
    finally:
        os.close(fd)
    data = b"".join(chunks)
    return data, {"status": "ok" if data else "empty"}


def read_kernel(kind: str, kernel_file: str | None, offset: int, since: float, until: float, timeout: float,
                max_bytes: int) -> tuple[str, bytes | None, dict]:
    """(where it was read from, its bytes, what the read was) of the kernel log, from the source `kind`
    (auto | journald | dmesg | file)."""
    if kind == "auto":
        kind = "file" if kernel_file else ("journald" if journal_available() else "dmesg")
    if kind == "file" and kernel_file:
        data, how = read_file(kernel_file, offset, max_bytes)
        return kernel_file, data, how
    if kind == "journald":
        data, how = read_journal(since, until, timeout, max_bytes)
        return "journald", data, how
    data, how = read_kmsg(max_bytes=max_bytes)
    return "/dev/kmsg", data, how
